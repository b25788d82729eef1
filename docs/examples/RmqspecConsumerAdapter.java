/*
 * An example rmqspec adapter in Java for protocol version 2 (docs/oracle.md, "Protocol version 2:
 * consumers under test"): a small push consumer with RocketMQ 4.9.8's classic consumer offset logic,
 * wired to the protocol the way a real client is.
 *
 * It declares the components pushConsumer and pushConsumer.orderly: concurrent and orderly push
 * consumers, CLUSTERING (RemoteBrokerOffsetStore) and BROADCASTING (LocalFileOffsetStore), AVG and
 * AVG_BY_CIRCLE allocation.
 *
 * The classes below are named and cut like the Java client's (org.apache.rocketmq.client.impl...):
 * MQClientInstance, PullMessageService, RebalanceService, RebalanceImpl (push flavour, with the orderly
 * broker locks), ProcessQueue, PullAPIWrapper and its PullCallback, DefaultMQPushConsumerImpl,
 * ConsumeMessageConcurrentlyService, ConsumeMessageOrderlyService, RemoteBrokerOffsetStore,
 * LocalFileOffsetStore, MQClientAPIImpl. Wrapping the real client instead means
 * keeping those classes and replacing only the seams marked DETERMINISM below:
 *
 *   - time: every class reads the VirtualClock, never System.currentTimeMillis();
 *   - scheduled tasks: ScheduledExecutor only records (task, due); a task runs when consumer.run names it;
 *   - the PullMessageService and RebalanceService threads are not started: their queue and wait are
 *     data, and consumer.run takes one pull request or runs doRebalance once;
 *   - the consume pool queues ConsumeRequests; consume.start runs one up to its listener call and
 *     consume.finish runs the rest with the listener's answer, an orderly one up to its next listener
 *     call (a real adapter parks the pool thread inside the listener on a SynchronousQueue; here the
 *     request is simply cut at that point); the orderly MessageQueueLock monitors and the pq's
 *     consumeLock are flags, since one thread moves at a time;
 *   - the network: MQClientAPIImpl talks to ScriptedRemotingClient, which records every request in send
 *     order, answers synchronous ones from the protocol request's "answers" (by "match": the queue asked
 *     about) and keeps each pull's callback until pull.reply;
 *   - iteration order: Java walks HashMaps; here queues are walked in MessageQueue order and topics in
 *     subscription order (the user's topic, then %RETRY%<group>), as the reference does, so the order
 *     in which answers are consumed is fixed.
 *
 * No dependencies. Compile and run:
 *
 *     javac -d /tmp/adapter docs/examples/RmqspecConsumerAdapter.java
 *     rmqspec conform --sut "java -cp /tmp/adapter RmqspecConsumerAdapter" \
 *         --components pushConsumer,pushConsumer.orderly
 *
 * (or, without compiling: --sut "java docs/examples/RmqspecConsumerAdapter.java").
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Collections;
import java.util.Comparator;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.Set;
import java.util.TreeMap;
import java.util.TreeSet;

public class RmqspecConsumerAdapter {

    static final String BROKER_NAME = "broker-a";
    static final String BROKER_ADDR = "broker-a:10911";
    static final String RETRY_GROUP_TOPIC_PREFIX = "%RETRY%";

    // ============================================================================================
    // Exceptions of the client, as thrown by the 4.9.8 classes
    // ============================================================================================

    static class MQClientException extends RuntimeException {
        MQClientException(String message) { super(message); }
    }

    static class MQBrokerException extends RuntimeException {
        final int responseCode;
        MQBrokerException(int responseCode) {
            super("CODE: " + responseCode);
            this.responseCode = responseCode;
        }
    }

    static class RemotingTimeoutException extends RuntimeException {
        RemotingTimeoutException(String message) { super(message); }
    }

    /** A malformed request: reported as the reference does, type ProtocolError. */
    static class ProtocolError extends RuntimeException {
        ProtocolError(String message) { super(message); }
    }

    // ============================================================================================
    // DETERMINISM: the virtual clock and the scheduled executor
    // ============================================================================================

    /** Stands for System.currentTimeMillis(); moves only on time.advance. One for every consumer. */
    static final class VirtualClock {
        long now;
    }

    /** A task of the scheduled executor; one-shot when period is 0. kind/mq let consumer.run find it. */
    static final class ScheduledTask {
        final String kind;
        final MessageQueue mq;
        final Runnable task;
        long due;
        final long period;

        ScheduledTask(String kind, MessageQueue mq, Runnable task, long due, long period) {
            this.kind = kind;
            this.mq = mq;
            this.task = task;
            this.due = due;
            this.period = period;
        }
    }

    /**
     * DETERMINISM: MQClientInstance's ScheduledExecutorService. schedule* only records the task with
     * its due time on the virtual clock; runDue runs one when consumer.run names it. A fixed-rate task
     * is re-armed at due + period (scheduleAtFixedRate counts from the planned run).
     */
    static final class ScheduledExecutor {
        final VirtualClock clock;
        final List<ScheduledTask> tasks = new ArrayList<>(); // in scheduling order
        boolean shutdown;

        ScheduledExecutor(VirtualClock clock) { this.clock = clock; }

        void schedule(String kind, MessageQueue mq, Runnable task, long delay) {
            if (!shutdown) tasks.add(new ScheduledTask(kind, mq, task, clock.now + delay, 0));
        }

        void scheduleAtFixedRate(String kind, Runnable task, long initialDelay, long period) {
            if (!shutdown) tasks.add(new ScheduledTask(kind, null, task, clock.now + initialDelay, period));
        }

        ScheduledTask find(String kind) {
            for (ScheduledTask t : tasks) if (t.kind.equals(kind)) return t;
            return null;
        }

        void runDue(ScheduledTask t) {
            if (t.period == 0) tasks.remove(t);
            else t.due += t.period;
            t.task.run();
        }

        void shutdownNow() {
            tasks.clear();
            shutdown = true;
        }
    }

    // ============================================================================================
    // Messages and queues
    // ============================================================================================

    /** org.apache.rocketmq.common.message.MessageQueue: ordered by topic, brokerName, queueId. */
    static final class MessageQueue implements Comparable<MessageQueue> {
        final String topic;
        final String brokerName;
        final int queueId;

        MessageQueue(String topic, String brokerName, int queueId) {
            this.topic = topic;
            this.brokerName = brokerName;
            this.queueId = queueId;
        }

        static MessageQueue of(Object json) {
            if (!(json instanceof Map)) throw new ProtocolError("a message queue must be an object");
            Map<String, Object> m = obj(json);
            return new MessageQueue((String) m.get("topic"), (String) m.get("brokerName"), (int) num(m.get("queueId")));
        }

        Map<String, Object> toJson() {
            Map<String, Object> m = new TreeMap<>();
            m.put("topic", topic);
            m.put("brokerName", brokerName);
            m.put("queueId", (long) queueId);
            return m;
        }

        @Override
        public int compareTo(MessageQueue o) {
            int c = topic.compareTo(o.topic);
            if (c != 0) return c;
            c = brokerName.compareTo(o.brokerName);
            return c != 0 ? c : Integer.compare(queueId, o.queueId);
        }

        @Override
        public boolean equals(Object o) {
            return o instanceof MessageQueue && compareTo((MessageQueue) o) == 0;
        }

        @Override
        public int hashCode() { return (topic.hashCode() * 31 + brokerName.hashCode()) * 31 + queueId; }
    }

    /** The part of MessageExt the offset logic reads. */
    static final class MessageExt {
        final String topic;
        final int queueId;
        final long queueOffset;
        final String msgId;
        final byte[] body = {'m'};
        int reconsumeTimes;
        final Map<String, String> properties = new HashMap<>();

        MessageExt(String topic, int queueId, long queueOffset) {
            this.topic = topic;
            this.queueId = queueId;
            this.queueOffset = queueOffset;
            this.msgId = topic + "-" + queueId + "-" + queueOffset; // the protocol names messages this way
        }
    }

    static String retryTopic(String group) { return RETRY_GROUP_TOPIC_PREFIX + group; }

    // ============================================================================================
    // DETERMINISM: the network. MQClientAPIImpl over a scripted remoting client
    // ============================================================================================

    /** What a pull's InvokeCallback becomes: the PullCallback, run when pull.reply answers. */
    interface PullCallback {
        void onSuccess(PullResult result);

        void onException(RuntimeException e);
    }

    static final class PendingPull {
        final int number;
        final MessageQueue mq;
        final PullRequestHeader header;
        final PullCallback callback;

        PendingPull(int number, MessageQueue mq, PullRequestHeader header, PullCallback callback) {
            this.number = number;
            this.mq = mq;
            this.header = header;
            this.callback = callback;
        }
    }

    static final class PullRequestHeader {
        String consumerGroup, topic;
        int queueId, maxMsgNums, sysFlag;
        long queueOffset, commitOffset;
    }

    /**
     * DETERMINISM: the RemotingClient. invokeSync takes the first answer of its request code left in the
     * current protocol request's answers that matches the request (none left: a timeout); invokeAsync (pulls) keeps the callback
     * until pull.reply; invokeOneway only records. Every request is recorded in send order for "sent",
     * except HEART_BEAT, UNREGISTER_CLIENT and GET_CONSUMER_LIST_BY_GROUP (which carry no offset).
     */
    static final class ScriptedRemotingClient {
        final World world;
        final List<PendingPull> pulls = new ArrayList<>(); // unanswered, oldest first
        int nextPull;

        ScriptedRemotingClient(World world) { this.world = world; }

        Map<String, Object> request(String code) {
            Map<String, Object> r = new TreeMap<>();
            r.put("code", code);
            r.put("brokerName", BROKER_NAME);
            return r;
        }

        /** The broker's answer to a synchronous request: a success (returned), an error code or a timeout. */
        Map<String, Object> invokeSync(Map<String, Object> request) {
            world.sent.add(request);
            String code = (String) request.get("code");
            Deque<Object> queue = world.answers.get(code);
            Map<String, Object> answer = null;
            if (queue != null) {
                for (Iterator<Object> it = queue.iterator(); it.hasNext(); ) {
                    Map<String, Object> candidate = obj(it.next());
                    if (matches(candidate, request)) { answer = candidate; it.remove(); break; }
                }
            }
            if (answer == null) throw new RemotingTimeoutException("wait response timeout: " + code);
            if (Boolean.TRUE.equals(answer.get("timeout"))) throw new RemotingTimeoutException("wait response timeout");
            if (answer.containsKey("responseCode") && num(answer.get("responseCode")) != 0) {
                throw new MQBrokerException((int) num(answer.get("responseCode")));
            }
            return answer;
        }

        /** An answer with "match" answers only a request whose fields (topic, queueId, group) equal all it names
         *  (a lock of one queue: that queue's): the broker answers by what is asked, in whatever order. */
        static boolean matches(Map<String, Object> answer, Map<String, Object> request) {
            Object match = answer.get("match");
            if (match == null) return true;
            Map<String, Object> asked = request;
            if (request.get("mqs") instanceof List && ((List<?>) request.get("mqs")).size() == 1) { // lock(mq)
                asked = new TreeMap<>(obj(((List<?>) request.get("mqs")).get(0)));
                asked.put("group", request.get("group"));
            }
            for (Map.Entry<String, Object> e : obj(match).entrySet()) {
                Object want = e.getValue(), got = asked.get(e.getKey());
                boolean equal = want instanceof Number && got instanceof Number ? num(want) == num(got) : Objects.equals(want, got);
                if (!equal) return false;
            }
            return true;
        }

        void invokeOneway(Map<String, Object> request) {
            request.put("oneway", true);
            world.sent.add(request);
        }

        void invokeAsync(PullRequestHeader h, PullCallback callback) {
            int number = nextPull++;
            Map<String, Object> r = request("PULL_MESSAGE");
            r.put("pull", (long) number);
            r.put("topic", h.topic);
            r.put("queueId", (long) h.queueId);
            r.put("group", h.consumerGroup);
            r.put("queueOffset", h.queueOffset);
            r.put("maxMsgNums", (long) h.maxMsgNums);
            r.put("sysFlag", (long) h.sysFlag);
            r.put("commitOffset", h.commitOffset);
            world.sent.add(r);
            pulls.add(new PendingPull(number, new MessageQueue(h.topic, BROKER_NAME, h.queueId), h, callback));
        }
    }

    static final class PullResult {
        final String pullStatus; // FOUND, NO_NEW_MSG, NO_MATCHED_MSG, OFFSET_ILLEGAL
        final long nextBeginOffset, minOffset, maxOffset;
        List<MessageExt> msgFoundList;

        PullResult(String pullStatus, long nextBeginOffset, long minOffset, long maxOffset, List<MessageExt> msgs) {
            this.pullStatus = pullStatus;
            this.nextBeginOffset = nextBeginOffset;
            this.minOffset = minOffset;
            this.maxOffset = maxOffset;
            this.msgFoundList = msgs;
        }
    }

    /** MQClientAPIImpl: one method per request the consumer sends. */
    static final class MQClientAPIImpl {
        final ScriptedRemotingClient remoting;

        MQClientAPIImpl(ScriptedRemotingClient remoting) { this.remoting = remoting; }

        void pullMessageAsync(PullRequestHeader header, PullCallback callback) {
            remoting.invokeAsync(header, callback);
        }

        long queryConsumerOffset(String group, MessageQueue mq) {
            Map<String, Object> r = remoting.request("QUERY_CONSUMER_OFFSET");
            r.put("topic", mq.topic);
            r.put("queueId", (long) mq.queueId);
            r.put("group", group);
            return offsetOf(remoting.invokeSync(r));
        }

        void updateConsumerOffsetOneway(String group, MessageQueue mq, long offset) {
            Map<String, Object> r = remoting.request("UPDATE_CONSUMER_OFFSET");
            r.put("topic", mq.topic);
            r.put("queueId", (long) mq.queueId);
            r.put("group", group);
            r.put("offset", offset);
            remoting.invokeOneway(r);
        }

        long getMaxOffset(MessageQueue mq) {
            Map<String, Object> r = remoting.request("GET_MAX_OFFSET");
            r.put("topic", mq.topic);
            r.put("queueId", (long) mq.queueId);
            return offsetOf(remoting.invokeSync(r));
        }

        long searchOffset(MessageQueue mq, long timestamp) {
            Map<String, Object> r = remoting.request("SEARCH_OFFSET_BY_TIMESTAMP");
            r.put("topic", mq.topic);
            r.put("queueId", (long) mq.queueId);
            r.put("timestamp", timestamp);
            return offsetOf(remoting.invokeSync(r));
        }

        /** GET_CONSUMER_LIST_BY_GROUP: answered by cluster.consumers (SYSTEM_ERROR while unset or empty). */
        List<String> getConsumerIdListByGroup(String group) {
            List<String> ids = remoting.world.consumerLists.get(group);
            if (ids == null || ids.isEmpty()) throw new MQBrokerException(1);
            return new ArrayList<>(ids);
        }

        void consumerSendMessageBack(MessageExt msg, String group, int delayLevel, int maxConsumeRetryTimes) {
            Map<String, Object> r = remoting.request("CONSUMER_SEND_MSG_BACK");
            r.put("group", group);
            r.put("msgId", msg.msgId);
            r.put("delayLevel", (long) delayLevel);
            r.put("maxReconsumeTimes", (long) maxConsumeRetryTimes);
            remoting.invokeSync(r);
        }

        void sendMessage(String topic, String originMsgId, int delayLevel, int reconsumeTimes) {
            Map<String, Object> r = remoting.request("SEND_MESSAGE");
            r.put("topic", topic);
            r.put("msgId", originMsgId);
            r.put("delayLevel", (long) delayLevel);
            r.put("reconsumeTimes", (long) reconsumeTimes);
            remoting.invokeSync(r);
        }

        /** LOCK_BATCH_MQ: the queues the broker granted ({"grantAll": true} or {"granted": [mq, ...]}). */
        Set<MessageQueue> lockBatchMQ(String group, String clientId, Set<MessageQueue> mqs) {
            Map<String, Object> answer = remoting.invokeSync(lockRequest("LOCK_BATCH_MQ", group, clientId, mqs));
            Set<MessageQueue> granted = new TreeSet<>();
            if (Boolean.TRUE.equals(answer.get("grantAll"))) {
                granted.addAll(mqs);
            } else if (answer.get("granted") instanceof List) {
                for (Object o : list(answer.get("granted"))) granted.add(MessageQueue.of(o));
                granted.retainAll(mqs);
            } else {
                throw new ProtocolError("an answer to LOCK_BATCH_MQ needs grantAll or granted");
            }
            return granted;
        }

        /**
         * UNLOCK_BATCH_MQ. The oneway form (unlock(mq, true)) is delivered like the synchronous one, its
         * answer ignored, as the reference does.
         */
        void unlockBatchMQ(String group, String clientId, Set<MessageQueue> mqs) {
            remoting.invokeSync(lockRequest("UNLOCK_BATCH_MQ", group, clientId, mqs));
        }

        private Map<String, Object> lockRequest(String code, String group, String clientId, Set<MessageQueue> mqs) {
            Map<String, Object> r = remoting.request(code);
            r.put("group", group);
            r.put("clientId", clientId);
            List<Object> list = new ArrayList<>();
            for (MessageQueue mq : mqs) list.add(mq.toJson());
            World.sortByJson(list);
            r.put("mqs", list);
            return r;
        }

        static long offsetOf(Map<String, Object> answer) {
            if (!answer.containsKey("offset")) throw new ProtocolError("a successful offset answer needs offset");
            return num(answer.get("offset"));
        }
    }

    // ============================================================================================
    // MQClientInstance, PullMessageService, RebalanceService
    // ============================================================================================

    static final class MQClientInstance {
        static final long PERSIST_CONSUMER_OFFSET_INITIAL_DELAY = 10_000;
        static final long PERSIST_CONSUMER_OFFSET_INTERVAL = 5_000; // persistConsumerOffsetInterval

        final String clientId;
        final VirtualClock clock;
        final ScheduledExecutor scheduledExecutorService;
        final MQClientAPIImpl mqClientAPIImpl;
        final PullMessageService pullMessageService;
        final RebalanceService rebalanceService;
        final Map<String, DefaultMQPushConsumerImpl> consumerTable = new LinkedHashMap<>();
        final Map<String, Integer> topicRoute = new LinkedHashMap<>(); // topic -> read queue count, on broker-a

        MQClientInstance(String clientId, VirtualClock clock, ScriptedRemotingClient remoting) {
            this.clientId = clientId;
            this.clock = clock;
            this.scheduledExecutorService = new ScheduledExecutor(clock);
            this.mqClientAPIImpl = new MQClientAPIImpl(remoting);
            this.pullMessageService = new PullMessageService(this);
            this.rebalanceService = new RebalanceService(this);
        }

        void start() {
            // startScheduledTask: of its tasks only persistAllConsumerOffset touches offsets (heartbeats,
            // route updates and the name-server fetch are not part of the protocol).
            scheduledExecutorService.scheduleAtFixedRate("persistOffsets", this::persistAllConsumerOffset,
                    PERSIST_CONSUMER_OFFSET_INITIAL_DELAY, PERSIST_CONSUMER_OFFSET_INTERVAL);
            pullMessageService.stopped = false; // DETERMINISM: the ServiceThread itself is never started
            rebalanceService.start();
        }

        void shutdown() {
            if (!consumerTable.isEmpty()) return;
            pullMessageService.stopped = true;
            pullMessageService.pullRequestQueue.clear();
            scheduledExecutorService.shutdownNow();
            rebalanceService.stopped = true;
            rebalanceService.hasNotified = false;
        }

        void persistAllConsumerOffset() {
            for (DefaultMQPushConsumerImpl c : new ArrayList<>(consumerTable.values())) c.persistConsumerOffset();
        }

        void doRebalance() {
            for (DefaultMQPushConsumerImpl c : new ArrayList<>(consumerTable.values())) c.doRebalance();
        }

        void rebalanceImmediately() { rebalanceService.wakeup(); }

        /** findConsumerIdList: any error (e.g. the broker's "no consumer") gives null. */
        List<String> findConsumerIdList(String topic, String group) {
            try {
                return mqClientAPIImpl.getConsumerIdListByGroup(group);
            } catch (MQBrokerException | RemotingTimeoutException e) {
                return null;
            }
        }

        /** topicRouteData2TopicSubscribeInfo: every readable queue of the topic. */
        Set<MessageQueue> topicSubscribeInfo(String topic) {
            Integer n = topicRoute.get(topic);
            if (n == null) return null;
            Set<MessageQueue> out = new TreeSet<>();
            for (int q = 0; q < n; q++) out.add(new MessageQueue(topic, BROKER_NAME, q));
            return out;
        }
    }

    static final class PullRequest {
        final String consumerGroup;
        final MessageQueue messageQueue;
        final ProcessQueue processQueue;
        long nextOffset;
        boolean previouslyLocked;

        PullRequest(String consumerGroup, MessageQueue mq, ProcessQueue pq, long nextOffset) {
            this.consumerGroup = consumerGroup;
            this.messageQueue = mq;
            this.processQueue = pq;
            this.nextOffset = nextOffset;
        }
    }

    /**
     * DETERMINISM: PullMessageService without its thread. pullRequestQueue holds each request with the
     * time it becomes runnable (executePullRequestLater's scheduled hand-off folded in); consumer.run
     * "pull" takes a runnable one and calls pullMessage. A dropped pq's request is discarded when the
     * thread would take it; requests of dropped pqs are purged as new ones arrive.
     */
    static final class PullMessageService {
        final MQClientInstance factory;
        final List<Object[]> pullRequestQueue = new ArrayList<>(); // {PullRequest, Long readyAt}
        boolean stopped = true;

        PullMessageService(MQClientInstance factory) { this.factory = factory; }

        void executePullRequestLater(PullRequest r, long delay) { put(r, factory.clock.now + delay); }

        void executePullRequestImmediately(PullRequest r) { put(r, factory.clock.now); }

        private void put(PullRequest r, long readyAt) {
            if (stopped) return;
            pullRequestQueue.removeIf(e -> !live((PullRequest) e[0]));
            if (live(r)) pullRequestQueue.add(new Object[] {r, readyAt});
        }

        /**
         * A dropped pq's request is discarded when the thread takes it; until then an orderly consumer's
         * request stays while its dropped pq is still in the table (the orderly removal left it there).
         */
        private boolean live(PullRequest r) {
            if (!r.processQueue.dropped) return true;
            DefaultMQPushConsumerImpl c = factory.consumerTable.get(r.consumerGroup);
            return c != null && c.consumeOrderly && c.rebalanceImpl.processQueueTable.get(r.messageQueue) == r.processQueue;
        }

        /** The first runnable request of mq whose pq is not dropped, taken off the queue; or null. */
        PullRequest take(MessageQueue mq) {
            for (Iterator<Object[]> it = pullRequestQueue.iterator(); it.hasNext(); ) {
                Object[] e = it.next();
                PullRequest r = (PullRequest) e[0];
                if ((Long) e[1] <= factory.clock.now && r.messageQueue.equals(mq) && !r.processQueue.dropped) {
                    it.remove();
                    return r;
                }
            }
            return null;
        }
    }

    /** DETERMINISM: RebalanceService without its thread: waits 20 s or until woken (waitForRunning). */
    static final class RebalanceService {
        static final long WAIT_INTERVAL = 20_000; // rocketmq.client.rebalance.waitInterval
        final MQClientInstance factory;
        boolean hasNotified, stopped = true;
        long waitDeadline;

        RebalanceService(MQClientInstance factory) { this.factory = factory; }

        void start() {
            stopped = false;
            waitDeadline = factory.clock.now + WAIT_INTERVAL;
        }

        void wakeup() { if (!stopped) hasNotified = true; }

        boolean isDue() { return !stopped && (hasNotified || waitDeadline <= factory.clock.now); }

        long dueTime() { return hasNotified ? factory.clock.now : waitDeadline; }

        /** One turn of run(): waitForRunning returns, then doRebalance; the next wait starts now. */
        void runOnce() {
            hasNotified = false;
            waitDeadline = factory.clock.now + WAIT_INTERVAL;
            factory.doRebalance();
        }
    }

    // ============================================================================================
    // Allocation (AllocateMessageQueueAveragely, AllocateMessageQueueAveragelyByCircle)
    // ============================================================================================

    interface AllocateMessageQueueStrategy {
        List<MessageQueue> allocate(String group, String currentCID, List<MessageQueue> mqAll, List<String> cidAll);
    }

    static final class AllocateMessageQueueAveragely implements AllocateMessageQueueStrategy {
        @Override
        public List<MessageQueue> allocate(String group, String currentCID, List<MessageQueue> mqAll, List<String> cidAll) {
            if (currentCID == null || currentCID.isEmpty()) throw new IllegalArgumentException("currentCID is empty");
            if (mqAll == null || mqAll.isEmpty()) throw new IllegalArgumentException("mqAll is null or mqAll empty");
            if (cidAll == null || cidAll.isEmpty()) throw new IllegalArgumentException("cidAll is null or cidAll empty");
            List<MessageQueue> result = new ArrayList<>();
            int index = cidAll.indexOf(currentCID);
            if (index < 0) return result; // "[BUG] ... not in cidAll"
            int n = mqAll.size(), c = cidAll.size();
            int mod = n % c;
            int averageSize = n <= c ? 1 : (mod > 0 && index < mod ? n / c + 1 : n / c);
            int startIndex = (mod > 0 && index < mod) ? index * averageSize : index * averageSize + mod;
            int range = Math.min(averageSize, n - startIndex);
            for (int i = 0; i < range; i++) result.add(mqAll.get((startIndex + i) % n));
            return result;
        }
    }

    static final class AllocateMessageQueueAveragelyByCircle implements AllocateMessageQueueStrategy {
        @Override
        public List<MessageQueue> allocate(String group, String currentCID, List<MessageQueue> mqAll, List<String> cidAll) {
            if (currentCID == null || currentCID.isEmpty()) throw new IllegalArgumentException("currentCID is empty");
            if (mqAll == null || mqAll.isEmpty()) throw new IllegalArgumentException("mqAll is null or mqAll empty");
            if (cidAll == null || cidAll.isEmpty()) throw new IllegalArgumentException("cidAll is null or cidAll empty");
            List<MessageQueue> result = new ArrayList<>();
            int index = cidAll.indexOf(currentCID);
            if (index < 0) return result;
            for (int i = index; i < mqAll.size(); i += cidAll.size()) result.add(mqAll.get(i));
            return result;
        }
    }

    // ============================================================================================
    // ProcessQueue
    // ============================================================================================

    /** ProcessQueue, concurrent part: msgTreeMap and the commit watermark removeMessage computes. */
    static final class ProcessQueue {
        static final long PULL_MAX_IDLE_TIME = 120_000; // rocketmq.client.pull.pullMaxIdleTime
        static final long REBALANCE_LOCK_MAX_LIVE_TIME = 30_000; // rocketmq.client.rebalance.lockMaxLiveTime
        final TreeMap<Long, MessageExt> msgTreeMap = new TreeMap<>();
        final TreeMap<Long, MessageExt> consumingMsgOrderlyTreeMap = new TreeMap<>();
        long msgCount, msgSize, queueOffsetMax;
        volatile boolean dropped, locked, consuming;
        long lastPullTimestamp, lastConsumeTimestamp, lastLockTimestamp;
        // consumeLock (a ReentrantLock): held by the orderly consume thread while its listener runs.
        // DETERMINISM: one thread moves at a time, so tryLock(1000) fails exactly when a listener runs.
        boolean consumeLockHeld;
        long tryUnlockTimes;

        ProcessQueue(long now) {
            lastPullTimestamp = now; // DETERMINISM: the constructor's System.currentTimeMillis()
            lastConsumeTimestamp = now;
            lastLockTimestamp = now;
        }

        boolean isPullExpired(long now) { return now - lastPullTimestamp > PULL_MAX_IDLE_TIME; }

        boolean isLockExpired(long now) { return now - lastLockTimestamp > REBALANCE_LOCK_MAX_LIVE_TIME; }

        boolean hasTempMessage() { return !msgTreeMap.isEmpty(); }

        /** takeMessages: the lowest batchSize messages move to the consuming map; none: consuming = false. */
        List<MessageExt> takeMessages(int batchSize, long now) {
            List<MessageExt> result = new ArrayList<>(batchSize);
            lastConsumeTimestamp = now;
            for (int i = 0; i < batchSize && !msgTreeMap.isEmpty(); i++) {
                Map.Entry<Long, MessageExt> entry = msgTreeMap.pollFirstEntry();
                result.add(entry.getValue());
                consumingMsgOrderlyTreeMap.put(entry.getKey(), entry.getValue());
            }
            if (result.isEmpty()) consuming = false;
            return result;
        }

        /** commit: one past the last consuming offset; the consuming map is emptied and uncounted. */
        long commit() {
            long offset = consumingMsgOrderlyTreeMap.lastKey(); // NoSuchElementException when empty
            msgCount -= consumingMsgOrderlyTreeMap.size();
            if (msgCount == 0) msgSize = 0;
            else for (MessageExt msg : consumingMsgOrderlyTreeMap.values()) msgSize -= msg.body.length;
            consumingMsgOrderlyTreeMap.clear();
            return offset + 1;
        }

        void makeMessageToConsumeAgain(List<MessageExt> msgs) {
            for (MessageExt msg : msgs) {
                consumingMsgOrderlyTreeMap.remove(msg.queueOffset);
                msgTreeMap.put(msg.queueOffset, msg);
            }
        }

        /** putMessage: insert by queue offset; each new key counts and moves queueOffsetMax. */
        boolean putMessage(List<MessageExt> msgs) {
            int validMsgCnt = 0;
            for (MessageExt msg : msgs) {
                MessageExt old = msgTreeMap.put(msg.queueOffset, msg);
                if (old == null) {
                    validMsgCnt++;
                    queueOffsetMax = msg.queueOffset;
                    msgSize += msg.body.length;
                }
            }
            msgCount += validMsgCnt;
            boolean dispatchToConsume = false;
            if (!msgTreeMap.isEmpty() && !consuming) {
                dispatchToConsume = true;
                consuming = true;
            }
            return dispatchToConsume;
        }

        /** removeMessage: the lowest offset still held, or queueOffsetMax + 1; -1 if the tree was empty. */
        long removeMessage(List<MessageExt> msgs, long now) {
            long result = -1;
            lastConsumeTimestamp = now;
            if (!msgTreeMap.isEmpty()) {
                result = queueOffsetMax + 1;
                int removedCnt = 0;
                for (MessageExt msg : msgs) {
                    if (msgTreeMap.remove(msg.queueOffset) != null) {
                        removedCnt++;
                        msgSize -= msg.body.length;
                    }
                }
                msgCount -= removedCnt;
                if (msgCount == 0) msgSize = 0;
                if (!msgTreeMap.isEmpty()) result = msgTreeMap.firstKey();
            }
            return result;
        }
    }

    // ============================================================================================
    // Offset stores
    // ============================================================================================

    enum ReadOffsetType { READ_FROM_MEMORY, READ_FROM_STORE, MEMORY_FIRST_THEN_STORE }

    interface OffsetStore {
        void load();

        void updateOffset(MessageQueue mq, long offset, boolean increaseOnly);

        long readOffset(MessageQueue mq, ReadOffsetType type);

        void persistAll(Set<MessageQueue> mqs);

        void persist(MessageQueue mq);

        void removeOffset(MessageQueue mq);

        Map<MessageQueue, Long> cloneOffsetTable();
    }

    /** updateOffset of both stores: a new entry as given; else max (increaseOnly) or overwrite. */
    static void updateOffsetTable(Map<MessageQueue, Long> table, MessageQueue mq, long offset, boolean increaseOnly) {
        if (mq == null) return;
        Long old = table.get(mq);
        if (old == null || !increaseOnly || offset > old) table.put(mq, offset);
    }

    /** RemoteBrokerOffsetStore (CLUSTERING). */
    static final class RemoteBrokerOffsetStore implements OffsetStore {
        final MQClientInstance factory;
        final String groupName;
        final Map<MessageQueue, Long> offsetTable = new TreeMap<>();

        RemoteBrokerOffsetStore(MQClientInstance factory, String groupName) {
            this.factory = factory;
            this.groupName = groupName;
        }

        @Override
        public void load() {}

        @Override
        public void updateOffset(MessageQueue mq, long offset, boolean increaseOnly) {
            updateOffsetTable(offsetTable, mq, offset, increaseOnly);
        }

        /** -1: no offset (4.9.8: the broker answered any error code); -2: the fetch failed (timeout). */
        @Override
        public long readOffset(MessageQueue mq, ReadOffsetType type) {
            if (type != ReadOffsetType.READ_FROM_STORE) {
                Long offset = offsetTable.get(mq);
                if (offset != null) return offset;
                if (type == ReadOffsetType.READ_FROM_MEMORY) return -1;
            }
            try {
                long brokerOffset = factory.mqClientAPIImpl.queryConsumerOffset(groupName, mq);
                updateOffset(mq, brokerOffset, false);
                return brokerOffset;
            } catch (MQBrokerException e) {
                return -1;
            } catch (RemotingTimeoutException | MQClientException e) {
                return -2;
            }
        }

        /** Send every entry of mqs oneway, then forget the entries not in mqs; an empty set does nothing. */
        @Override
        public void persistAll(Set<MessageQueue> mqs) {
            if (mqs == null || mqs.isEmpty()) return;
            Set<MessageQueue> unusedMQ = new HashSet<>();
            for (Map.Entry<MessageQueue, Long> e : offsetTable.entrySet()) {
                if (mqs.contains(e.getKey())) factory.mqClientAPIImpl.updateConsumerOffsetOneway(groupName, e.getKey(), e.getValue());
                else unusedMQ.add(e.getKey());
            }
            for (MessageQueue mq : unusedMQ) offsetTable.remove(mq);
        }

        @Override
        public void persist(MessageQueue mq) {
            Long offset = offsetTable.get(mq);
            if (offset != null) factory.mqClientAPIImpl.updateConsumerOffsetOneway(groupName, mq, offset);
        }

        @Override
        public void removeOffset(MessageQueue mq) { offsetTable.remove(mq); }

        @Override
        public Map<MessageQueue, Long> cloneOffsetTable() { return new TreeMap<>(offsetTable); }
    }

    /**
     * LocalFileOffsetStore (BROADCASTING): <dir>/<clientId>/<group>/offsets.json. DETERMINISM: the
     * "directory" is World.files, which reset empties; a real adapter sets rocketmq.client.localOffsetStoreDir
     * to a temporary directory and deletes it on reset. Two consumers with the same clientId and group
     * share one file, which is how a sequence restarts a BROADCASTING consumer.
     */
    static final class LocalFileOffsetStore implements OffsetStore {
        final Map<String, Map<MessageQueue, Long>> files;
        final String storePath;
        final Map<MessageQueue, Long> offsetTable = new TreeMap<>();

        LocalFileOffsetStore(Map<String, Map<MessageQueue, Long>> files, String clientId, String groupName) {
            this.files = files;
            this.storePath = clientId + "/" + groupName + "/offsets.json";
        }

        Map<MessageQueue, Long> readLocalOffset() {
            Map<MessageQueue, Long> content = files.get(storePath);
            return content == null ? null : new TreeMap<>(content);
        }

        @Override
        public void load() {
            Map<MessageQueue, Long> table = readLocalOffset();
            if (table != null) offsetTable.putAll(table);
        }

        @Override
        public void updateOffset(MessageQueue mq, long offset, boolean increaseOnly) {
            updateOffsetTable(offsetTable, mq, offset, increaseOnly);
        }

        @Override
        public long readOffset(MessageQueue mq, ReadOffsetType type) {
            if (type != ReadOffsetType.READ_FROM_STORE) {
                Long offset = offsetTable.get(mq);
                if (offset != null) return offset;
                if (type == ReadOffsetType.READ_FROM_MEMORY) return -1;
            }
            Map<MessageQueue, Long> table = readLocalOffset();
            if (table == null || !table.containsKey(mq)) return -1;
            long offset = table.get(mq);
            updateOffset(mq, offset, false);
            return offset;
        }

        /** 4.9.8 merges: the file's entries, overwritten by the memory entries of mqs. */
        @Override
        public void persistAll(Set<MessageQueue> mqs) {
            if (mqs == null || mqs.isEmpty()) return;
            Map<MessageQueue, Long> wrapper = readLocalOffset();
            if (wrapper == null) wrapper = new TreeMap<>();
            for (Map.Entry<MessageQueue, Long> e : offsetTable.entrySet()) {
                if (mqs.contains(e.getKey())) wrapper.put(e.getKey(), e.getValue());
            }
            files.put(storePath, wrapper);
        }

        @Override
        public void persist(MessageQueue mq) {
            Long offset = offsetTable.get(mq);
            if (offset == null) return;
            Map<MessageQueue, Long> wrapper = readLocalOffset();
            if (wrapper == null) wrapper = new TreeMap<>();
            wrapper.put(mq, offset);
            files.put(storePath, wrapper);
        }

        @Override
        public void removeOffset(MessageQueue mq) { offsetTable.remove(mq); }

        @Override
        public Map<MessageQueue, Long> cloneOffsetTable() { return new TreeMap<>(offsetTable); }
    }

    // ============================================================================================
    // RebalanceImpl / RebalancePushImpl
    // ============================================================================================

    static final class RebalancePushImpl {
        final DefaultMQPushConsumerImpl consumer;
        final MQClientInstance factory;
        final String consumerGroup;
        String messageModel;
        final AllocateMessageQueueStrategy strategy;
        // DETERMINISM: a TreeMap (Java: ConcurrentHashMap), so both phases walk queues in MessageQueue order.
        final TreeMap<MessageQueue, ProcessQueue> processQueueTable = new TreeMap<>();
        final Map<String, Set<MessageQueue>> topicSubscribeInfoTable = new HashMap<>();
        // DETERMINISM: the user's topic, then the retry topic (Java: ConcurrentHashMap order).
        final LinkedHashMap<String, String> subscriptionInner = new LinkedHashMap<>();

        RebalancePushImpl(DefaultMQPushConsumerImpl consumer, AllocateMessageQueueStrategy strategy) {
            this.consumer = consumer;
            this.factory = consumer.factory;
            this.consumerGroup = consumer.consumerGroup;
            this.strategy = strategy;
        }

        void doRebalance() {
            for (String topic : new ArrayList<>(subscriptionInner.keySet())) {
                try {
                    rebalanceByTopic(topic, consumer.consumeOrderly);
                } catch (RuntimeException e) {
                    // caught per topic; logged unless a retry topic
                }
            }
            truncateMessageQueueNotMyTopic();
        }

        private void rebalanceByTopic(String topic, boolean isOrder) {
            Set<MessageQueue> mqSet = topicSubscribeInfoTable.get(topic);
            if (messageModel.equals("BROADCASTING")) {
                // 4.9.8 passes isOrder on here too: an orderly BROADCASTING consumer locks its queues
                if (mqSet != null) updateProcessQueueTableInRebalance(topic, mqSet, isOrder);
                return;
            }
            List<String> cidAll = factory.findConsumerIdList(topic, consumerGroup);
            if (mqSet == null || cidAll == null) return;
            List<MessageQueue> mqAll = new ArrayList<>(mqSet);
            Collections.sort(mqAll);
            Collections.sort(cidAll);
            List<MessageQueue> allocateResult;
            try {
                allocateResult = strategy.allocate(consumerGroup, factory.clientId, mqAll, cidAll);
            } catch (Throwable e) {
                return;
            }
            Set<MessageQueue> allocateResultSet = new TreeSet<>();
            if (allocateResult != null) allocateResultSet.addAll(allocateResult);
            updateProcessQueueTableInRebalance(topic, allocateResultSet, isOrder);
            // messageQueueChanged: a new subVersion and a heartbeat; neither touches offsets
        }

        private void truncateMessageQueueNotMyTopic() {
            for (Iterator<Map.Entry<MessageQueue, ProcessQueue>> it = processQueueTable.entrySet().iterator(); it.hasNext(); ) {
                Map.Entry<MessageQueue, ProcessQueue> e = it.next();
                if (!subscriptionInner.containsKey(e.getKey().topic)) {
                    e.getValue().dropped = true;
                    it.remove();
                }
            }
        }

        private boolean updateProcessQueueTableInRebalance(String topic, Set<MessageQueue> mqSet, boolean isOrder) {
            boolean changed = false;
            long now = factory.clock.now;
            for (Iterator<Map.Entry<MessageQueue, ProcessQueue>> it = processQueueTable.entrySet().iterator(); it.hasNext(); ) {
                Map.Entry<MessageQueue, ProcessQueue> e = it.next();
                MessageQueue mq = e.getKey();
                ProcessQueue pq = e.getValue();
                if (!mq.topic.equals(topic)) continue;
                // not allocated any more, or (CONSUME_PASSIVELY) not pulled for 120 s: re-created below
                if (!mqSet.contains(mq) || pq.isPullExpired(now)) {
                    pq.dropped = true;
                    if (removeUnnecessaryMessageQueue(mq, pq)) {
                        it.remove();
                        changed = true;
                    }
                }
            }
            List<PullRequest> pullRequestList = new ArrayList<>();
            for (MessageQueue mq : mqSet) { // a TreeSet: MessageQueue order
                if (processQueueTable.containsKey(mq)) continue;
                if (isOrder && !lock(mq)) continue; // "add a new mq failed, because lock failed"
                removeDirtyOffset(mq);
                ProcessQueue pq = new ProcessQueue(now);
                pq.locked = true; // 4.9.8 sets it for every new pq
                long nextOffset;
                try {
                    nextOffset = computePullFromWhereWithException(mq);
                } catch (RuntimeException e) {
                    continue; // "compute offset failed"
                }
                if (nextOffset >= 0) {
                    processQueueTable.put(mq, pq);
                    pullRequestList.add(new PullRequest(consumerGroup, mq, pq, nextOffset));
                    changed = true;
                }
            }
            dispatchPullRequest(pullRequestList);
            return changed;
        }

        /**
         * Persist oneway, then forget the memory entry; true: the pq leaves the table. An orderly
         * CLUSTERING consumer needs the pq's consume lock (tryLock(1000)): without it the dropped pq stays
         * in the table; with it, unlockDelay.
         */
        boolean removeUnnecessaryMessageQueue(MessageQueue mq, ProcessQueue pq) {
            consumer.offsetStore.persist(mq);
            consumer.offsetStore.removeOffset(mq);
            if (consumer.consumeOrderly && messageModel.equals("CLUSTERING")) {
                if (!pq.consumeLockHeld) {
                    pq.consumeLockHeld = true;
                    try {
                        return unlockDelay(mq, pq);
                    } finally {
                        pq.consumeLockHeld = false;
                    }
                }
                pq.tryUnlockTimes++; // "[WRONG]mq is consuming, so can not unlock it"
                return false;
            }
            return true;
        }

        /** 4.9.8 unlockDelay: with messages in the tree, unlock(mq, true) 20 s later; else at once. */
        private boolean unlockDelay(final MessageQueue mq, ProcessQueue pq) {
            if (pq.hasTempMessage()) {
                factory.scheduledExecutorService.schedule("unlockDelay", mq, () -> unlock(mq, true), UNLOCK_DELAY_TIME_MILLS);
            } else {
                unlock(mq, true);
            }
            return true;
        }

        static final long UNLOCK_DELAY_TIME_MILLS = 20_000; // rocketmq.client.unlockDelayTimeMills

        /** lock(mq): LOCK_BATCH_MQ for {mq}; granted queues with a pq are locked anew. Any exception: false. */
        boolean lock(MessageQueue mq) {
            Set<MessageQueue> lockedMq;
            try {
                lockedMq = factory.mqClientAPIImpl.lockBatchMQ(consumerGroup, factory.clientId, Collections.singleton(mq));
            } catch (RuntimeException e) {
                return false;
            }
            for (MessageQueue mmqq : lockedMq) {
                ProcessQueue pq = processQueueTable.get(mmqq);
                if (pq != null) {
                    pq.locked = true;
                    pq.lastLockTimestamp = factory.clock.now;
                }
            }
            return lockedMq.contains(mq);
        }

        /** lockAll: one LOCK_BATCH_MQ for every queue of the table (4.9.8: dropped ones too). */
        void lockAll() {
            Set<MessageQueue> mqs = new TreeSet<>(processQueueTable.keySet());
            if (mqs.isEmpty()) return;
            Set<MessageQueue> lockOKMQSet;
            try {
                lockOKMQSet = factory.mqClientAPIImpl.lockBatchMQ(consumerGroup, factory.clientId, mqs);
            } catch (RuntimeException e) {
                return;
            }
            for (MessageQueue mq : mqs) {
                ProcessQueue pq = processQueueTable.get(mq);
                if (pq == null) continue;
                if (lockOKMQSet.contains(mq)) {
                    pq.locked = true;
                    pq.lastLockTimestamp = factory.clock.now;
                } else {
                    pq.locked = false;
                }
            }
        }

        /** unlock(mq, oneway): UNLOCK_BATCH_MQ for {mq}; failures are logged, pq.locked is not touched. */
        void unlock(MessageQueue mq, boolean oneway) {
            try {
                factory.mqClientAPIImpl.unlockBatchMQ(consumerGroup, factory.clientId, Collections.singleton(mq));
            } catch (RuntimeException e) {
                // logged
            }
        }

        /** unlockAll(oneway): UNLOCK_BATCH_MQ for the table's queues, then locked = false on each. */
        void unlockAll(boolean oneway) {
            Set<MessageQueue> mqs = new TreeSet<>(processQueueTable.keySet());
            if (mqs.isEmpty()) return;
            try {
                factory.mqClientAPIImpl.unlockBatchMQ(consumerGroup, factory.clientId, mqs);
            } catch (RuntimeException e) {
                return;
            }
            for (MessageQueue mq : mqs) {
                ProcessQueue pq = processQueueTable.get(mq);
                if (pq != null) pq.locked = false;
            }
        }

        void removeDirtyOffset(MessageQueue mq) { consumer.offsetStore.removeOffset(mq); }

        /** removeProcessQueue: whichever pq the table holds for mq now. */
        void removeProcessQueue(MessageQueue mq) {
            ProcessQueue prev = processQueueTable.remove(mq);
            if (prev != null) {
                prev.dropped = true;
                removeUnnecessaryMessageQueue(mq, prev);
            }
        }

        /**
         * computePullFromWhereWithException (4.9.8): the stored offset; -1 when the store could not be
         * read (-2); with no offset, by consumeFromWhere. maxOffset/searchOffset failures throw
         * MQClientException (MQAdminImpl wraps them).
         */
        long computePullFromWhereWithException(MessageQueue mq) {
            OffsetStore store = consumer.offsetStore;
            long lastOffset = store.readOffset(mq, ReadOffsetType.READ_FROM_STORE);
            boolean retry = mq.topic.startsWith(RETRY_GROUP_TOPIC_PREFIX);
            String cfw = consumer.consumeFromWhere;
            if (lastOffset >= 0) return lastOffset;
            if (lastOffset != -1) return -1;
            switch (cfw) {
                case "CONSUME_FROM_LAST_OFFSET":
                case "CONSUME_FROM_LAST_OFFSET_AND_FROM_MIN_WHEN_BOOT_FIRST":
                case "CONSUME_FROM_MIN_OFFSET":
                case "CONSUME_FROM_MAX_OFFSET":
                    return retry ? 0 : maxOffset(mq);
                case "CONSUME_FROM_FIRST_OFFSET":
                    return 0;
                case "CONSUME_FROM_TIMESTAMP":
                    // 4.9.8 keeps consumeTimestamp as a yyyyMMddHHmmss string: whole seconds
                    return retry ? maxOffset(mq) : searchOffset(mq, consumer.consumeTimestamp / 1000 * 1000);
                default:
                    return -1;
            }
        }

        private long maxOffset(MessageQueue mq) {
            try {
                return factory.mqClientAPIImpl.getMaxOffset(mq);
            } catch (MQBrokerException | RemotingTimeoutException e) {
                throw new MQClientException("Invoke Broker[" + mq.brokerName + "] exception");
            }
        }

        private long searchOffset(MessageQueue mq, long timestamp) {
            try {
                return factory.mqClientAPIImpl.searchOffset(mq, timestamp);
            } catch (MQBrokerException | RemotingTimeoutException e) {
                throw new MQClientException("Invoke Broker[" + mq.brokerName + "] exception");
            }
        }

        /** 4.9.8: every new queue's first pull is runnable at once. */
        void dispatchPullRequest(List<PullRequest> pullRequestList) {
            for (PullRequest r : pullRequestList) consumer.executePullRequestImmediately(r);
        }

        void destroy() {
            for (ProcessQueue pq : processQueueTable.values()) pq.dropped = true;
            processQueueTable.clear();
        }
    }

    // ============================================================================================
    // PullAPIWrapper
    // ============================================================================================

    static final class PullSysFlag {
        static final int FLAG_COMMIT_OFFSET = 1, FLAG_SUSPEND = 1 << 1, FLAG_SUBSCRIPTION = 1 << 2, FLAG_CLASS_FILTER = 1 << 3;

        static int buildSysFlag(boolean commitOffset, boolean suspend, boolean subscription, boolean classFilter) {
            int flag = 0;
            if (commitOffset) flag |= FLAG_COMMIT_OFFSET;
            if (suspend) flag |= FLAG_SUSPEND;
            if (subscription) flag |= FLAG_SUBSCRIPTION;
            if (classFilter) flag |= FLAG_CLASS_FILTER;
            return flag;
        }
    }

    static final class PullAPIWrapper {
        final MQClientInstance factory;
        final String consumerGroup;

        PullAPIWrapper(MQClientInstance factory, String consumerGroup) {
            this.factory = factory;
            this.consumerGroup = consumerGroup;
        }

        /** pullKernelImpl: to the master (the only broker address), asynchronously. */
        void pullKernelImpl(MessageQueue mq, long offset, int maxNums, int sysFlag, long commitOffset, PullCallback cb) {
            PullRequestHeader h = new PullRequestHeader();
            h.consumerGroup = consumerGroup;
            h.topic = mq.topic;
            h.queueId = mq.queueId;
            h.queueOffset = offset;
            h.maxMsgNums = maxNums;
            h.sysFlag = sysFlag;
            h.commitOffset = commitOffset;
            factory.mqClientAPIImpl.pullMessageAsync(h, cb);
        }

        /** processPullResult: subscription "*" keeps every message; MIN/MAX_OFFSET are stamped on each. */
        PullResult processPullResult(PullResult result) {
            if (result.pullStatus.equals("FOUND")) {
                for (MessageExt msg : result.msgFoundList) {
                    msg.properties.put("MIN_OFFSET", String.valueOf(result.minOffset));
                    msg.properties.put("MAX_OFFSET", String.valueOf(result.maxOffset));
                }
            }
            return result;
        }
    }

    // ============================================================================================
    // DefaultMQPushConsumerImpl
    // ============================================================================================

    static final class DefaultMQPushConsumerImpl {
        // pullTimeDelayMillsWhenException: the field says 3000, but the constructor copies the consumer's
        // ClientConfig default over it, 1000 (DefaultMQPushConsumerImpl.java:124, ClientConfig.java:58).
        static final long PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION = 1_000;
        static final long OFFSET_ILLEGAL_FIX_DELAY = 10_000; // 4.9.8's executeTaskLater(..., 10000)

        final MQClientInstance factory;
        final String consumerGroup, topic, messageModel, consumeFromWhere;
        final long consumeTimestamp;
        final int pullBatchSize, consumeMessageBatchMaxSize, maxReconsumeTimes;
        final Map<String, Map<MessageQueue, Long>> files;
        final RebalancePushImpl rebalanceImpl;
        final PullAPIWrapper pullAPIWrapper;
        final boolean consumeOrderly; // Java: the listener is a MessageListenerOrderly
        final ConsumeMessageService consumeMessageService;
        OffsetStore offsetStore;
        String serviceState = "CREATE_JUST";

        DefaultMQPushConsumerImpl(MQClientInstance factory, Map<String, Object> args, Map<String, Map<MessageQueue, Long>> files) {
            this.factory = factory;
            this.files = files;
            consumerGroup = (String) args.get("group");
            topic = (String) args.get("topic");
            messageModel = (String) args.getOrDefault("messageModel", "CLUSTERING");
            if (!messageModel.equals("CLUSTERING") && !messageModel.equals("BROADCASTING")) {
                throw new ProtocolError("messageModel must be CLUSTERING or BROADCASTING");
            }
            consumeFromWhere = (String) args.getOrDefault("consumeFromWhere", "CONSUME_FROM_LAST_OFFSET");
            consumeTimestamp = num(args.getOrDefault("consumeTimestamp", 0L));
            pullBatchSize = (int) num(args.getOrDefault("pullBatchSize", 32L));
            consumeMessageBatchMaxSize = (int) num(args.getOrDefault("consumeMessageBatchMaxSize", 1L));
            maxReconsumeTimes = (int) num(args.getOrDefault("maxReconsumeTimes", -1L));
            String strategy = (String) args.getOrDefault("strategy", "AVG");
            AllocateMessageQueueStrategy s;
            if (strategy.equals("AVG")) s = new AllocateMessageQueueAveragely();
            else if (strategy.equals("AVG_BY_CIRCLE")) s = new AllocateMessageQueueAveragelyByCircle();
            else throw new ProtocolError("strategy must be AVG or AVG_BY_CIRCLE");
            rebalanceImpl = new RebalancePushImpl(this, s);
            pullAPIWrapper = new PullAPIWrapper(factory, consumerGroup);
            consumeOrderly = Boolean.TRUE.equals(args.get("orderly"));
            consumeMessageService = consumeOrderly
                    ? new ConsumeMessageOrderlyService(this)
                    : new ConsumeMessageConcurrentlyService(this);
            offsetStore = new RemoteBrokerOffsetStore(factory, consumerGroup);
            // the route is fixed at consumer.new: the topic's queues on broker-a, and the retry topic's one
            factory.topicRoute.put(topic, (int) num(args.getOrDefault("queues", 4L)));
            factory.topicRoute.put(retryTopic(consumerGroup), 1);
        }

        void start() {
            if (!serviceState.equals("CREATE_JUST")) {
                throw new MQClientException("The PushConsumer service state not OK, maybe started once, " + serviceState);
            }
            serviceState = "START_FAILED";
            // copySubscription: the topic with "*", and in CLUSTERING the retry topic
            rebalanceImpl.subscriptionInner.put(topic, "*");
            if (messageModel.equals("CLUSTERING")) rebalanceImpl.subscriptionInner.put(retryTopic(consumerGroup), "*");
            rebalanceImpl.messageModel = messageModel;
            offsetStore = messageModel.equals("BROADCASTING")
                    ? new LocalFileOffsetStore(files, factory.clientId, consumerGroup)
                    : new RemoteBrokerOffsetStore(factory, consumerGroup);
            offsetStore.load();
            consumeMessageService.start();
            if (factory.consumerTable.putIfAbsent(consumerGroup, this) != null) {
                serviceState = "CREATE_JUST";
                consumeMessageService.shutdown();
                throw new MQClientException("The consumer group[" + consumerGroup + "] has been created before");
            }
            factory.start();
            serviceState = "RUNNING";
            // updateTopicSubscribeInfoWhenSubscriptionChanged
            for (String t : rebalanceImpl.subscriptionInner.keySet()) {
                Set<MessageQueue> mqs = factory.topicSubscribeInfo(t);
                if (mqs != null) rebalanceImpl.topicSubscribeInfoTable.put(t, mqs);
            }
            // sendHeartbeatToAllBrokerWithLock (not reported), then:
            factory.rebalanceImmediately();
        }

        void shutdown() {
            if (!serviceState.equals("RUNNING")) return;
            consumeMessageService.shutdown();
            persistConsumerOffset();
            factory.consumerTable.remove(consumerGroup); // unregisterConsumer (UNREGISTER_CLIENT not reported)
            factory.shutdown();
            rebalanceImpl.destroy();
            serviceState = "SHUTDOWN_ALREADY";
        }

        void persistConsumerOffset() {
            if (!serviceState.equals("RUNNING")) return;
            offsetStore.persistAll(new HashSet<>(rebalanceImpl.processQueueTable.keySet()));
        }

        void doRebalance() { rebalanceImpl.doRebalance(); }

        void executePullRequestImmediately(PullRequest r) { factory.pullMessageService.executePullRequestImmediately(r); }

        void executePullRequestLater(PullRequest r, long delay) { factory.pullMessageService.executePullRequestLater(r, delay); }

        /** correctTagsOffset: with nothing cached, the pull cursor becomes the offset (increase only). */
        void correctTagsOffset(PullRequest r) {
            if (r.processQueue.msgCount == 0) offsetStore.updateOffset(r.messageQueue, r.nextOffset, true);
        }

        int getMaxReconsumeTimes() { return maxReconsumeTimes == -1 ? 16 : maxReconsumeTimes; }

        /**
         * pullMessage. Flow control (1000 messages, 100 MiB, span 2000) cannot trigger within a sequence
         * and is left out; the subscription is "*", so no tags and no subscription flag.
         */
        void pullMessage(final PullRequest pullRequest) {
            final ProcessQueue pq = pullRequest.processQueue;
            if (pq.dropped) return;
            pq.lastPullTimestamp = factory.clock.now;
            if (!serviceState.equals("RUNNING")) {
                executePullRequestLater(pullRequest, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION);
                return;
            }
            if (consumeOrderly) {
                // an unlocked pq retries in 3 s; the first pull of a locked one re-reads its offset
                if (!pq.locked) {
                    executePullRequestLater(pullRequest, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION);
                    return;
                }
                if (!pullRequest.previouslyLocked) {
                    long offset;
                    try {
                        offset = rebalanceImpl.computePullFromWhereWithException(pullRequest.messageQueue);
                    } catch (RuntimeException e) {
                        executePullRequestLater(pullRequest, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION);
                        return;
                    }
                    pullRequest.previouslyLocked = true;
                    pullRequest.nextOffset = offset;
                }
            }
            if (!rebalanceImpl.subscriptionInner.containsKey(pullRequest.messageQueue.topic)) {
                executePullRequestLater(pullRequest, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION);
                return;
            }
            boolean commitOffsetEnable = false;
            long commitOffsetValue = 0L;
            if (messageModel.equals("CLUSTERING")) {
                commitOffsetValue = offsetStore.readOffset(pullRequest.messageQueue, ReadOffsetType.READ_FROM_MEMORY);
                if (commitOffsetValue > 0) commitOffsetEnable = true; // strictly positive
            }
            int sysFlag = PullSysFlag.buildSysFlag(commitOffsetEnable, true, false, false);
            PullCallback pullCallback = new PullCallback() {
                @Override
                public void onSuccess(PullResult pullResult) {
                    pullResult = pullAPIWrapper.processPullResult(pullResult);
                    switch (pullResult.pullStatus) {
                        case "FOUND":
                            pullRequest.nextOffset = pullResult.nextBeginOffset;
                            if (pullResult.msgFoundList.isEmpty()) {
                                executePullRequestImmediately(pullRequest);
                            } else {
                                boolean dispatchToConsume = pq.putMessage(pullResult.msgFoundList);
                                consumeMessageService.submitConsumeRequest(pullResult.msgFoundList, pq,
                                        pullRequest.messageQueue, dispatchToConsume);
                                executePullRequestImmediately(pullRequest); // pullInterval 0
                            }
                            break;
                        case "NO_NEW_MSG":
                        case "NO_MATCHED_MSG":
                            pullRequest.nextOffset = pullResult.nextBeginOffset;
                            correctTagsOffset(pullRequest);
                            executePullRequestImmediately(pullRequest);
                            break;
                        case "OFFSET_ILLEGAL":
                            pullRequest.nextOffset = pullResult.nextBeginOffset;
                            pq.dropped = true;
                            // 4.9.8: the correction waits 10 s on the client instance's scheduler
                            factory.scheduledExecutorService.schedule("fixOffset", pullRequest.messageQueue,
                                    new FixOffsetTask(pullRequest), OFFSET_ILLEGAL_FIX_DELAY);
                            break;
                        default:
                            break;
                    }
                }

                @Override
                public void onException(RuntimeException e) {
                    executePullRequestLater(pullRequest, PULL_TIME_DELAY_MILLS_WHEN_EXCEPTION);
                }
            };
            pullsInFlight.put(pullCallback, pullRequest);
            pullAPIWrapper.pullKernelImpl(pullRequest.messageQueue, pullRequest.nextOffset, pullBatchSize, sysFlag,
                    commitOffsetValue, pullCallback);
        }

        // Not the client's: where each PullRequest is while it is not in the pull queue, for the
        // observation's pull cursors (a pull on the wire, or waiting in an OFFSET_ILLEGAL task).
        final Map<PullCallback, PullRequest> pullsInFlight = new HashMap<>();

        /** The Runnable of 4.9.8's OFFSET_ILLEGAL branch: overwrite, persist, remove the queue's pq. */
        final class FixOffsetTask implements Runnable {
            final PullRequest pullRequest;

            FixOffsetTask(PullRequest pullRequest) { this.pullRequest = pullRequest; }

            @Override
            public void run() {
                offsetStore.updateOffset(pullRequest.messageQueue, pullRequest.nextOffset, false);
                offsetStore.persist(pullRequest.messageQueue);
                rebalanceImpl.removeProcessQueue(pullRequest.messageQueue);
            }
        }

        /**
         * sendMessageBack: CONSUMER_SEND_MSG_BACK to the master; on any failure, the client's inner
         * producer sends a copy to %RETRY%<group> at delay level 3 + reconsumeTimes. Throws if both fail.
         * The fall-back is sent once with the original msgId as ORIGIN_MESSAGE_ID, as the reference reports it
         * (4.9.8 itself differs: see the note at the end of this file).
         */
        void sendMessageBack(MessageExt msg, int delayLevel) {
            try {
                factory.mqClientAPIImpl.consumerSendMessageBack(msg, consumerGroup, delayLevel, getMaxReconsumeTimes());
            } catch (RuntimeException e) {
                String originMsgId = msg.properties.get("ORIGIN_MESSAGE_ID");
                String origin = originMsgId == null || originMsgId.isEmpty() ? msg.msgId : originMsgId;
                factory.mqClientAPIImpl.sendMessage(retryTopic(consumerGroup), origin, 3 + msg.reconsumeTimes,
                        msg.reconsumeTimes + 1);
            }
        }
    }

    // ============================================================================================
    // ConsumeMessageConcurrentlyService
    // ============================================================================================

    /** What both consume services offer the consumer and, for the protocol, the adapter. */
    interface ConsumeMessageService {
        void start();

        void shutdown();

        void submitConsumeRequest(List<MessageExt> msgs, ProcessQueue pq, MessageQueue mq, boolean dispatchToConsume);

        /** consume.start: a pool thread takes the first ready request of mq and runs it to its listener. */
        Map<String, Object> startOne(MessageQueue mq);

        /** consume.finish: the oldest listener call on mq returns. */
        Map<String, Object> finishOne(MessageQueue mq, String status, int ackIndex);

        /** The listener calls running now, by call number. */
        List<Object> listeningJson();

        /** The requests waiting in the pool: {mq, readyAt}. */
        List<Object[]> queued();
    }

    static Map<String, Object> callJson(int call, MessageQueue mq, List<MessageExt> msgs) {
        Map<String, Object> m = new TreeMap<>();
        m.put("call", (long) call);
        m.put("mq", mq.toJson());
        List<Object> offsets = new ArrayList<>();
        for (MessageExt msg : msgs) offsets.add(msg.queueOffset);
        m.put("msgs", offsets);
        return m;
    }

    static final class ConsumeMessageConcurrentlyService implements ConsumeMessageService {
        static final long SUBMIT_LATER_DELAY = 5_000;
        final DefaultMQPushConsumerImpl consumer;
        // DETERMINISM: the consume pool's work queue, {ConsumeRequest, Long readyAt} in submission order;
        // submitConsumeRequestLater's 5 s scheduled hand-off is folded into readyAt.
        final List<Object[]> consumeExecutorQueue = new ArrayList<>();
        final Map<Integer, ConsumeRequest> listening = new TreeMap<>(); // call number -> request
        int nextCall;
        boolean shutdown;

        ConsumeMessageConcurrentlyService(DefaultMQPushConsumerImpl consumer) { this.consumer = consumer; }

        @Override
        public void start() {} // cleanExpireMsg (every consumeTimeout, 15 min) is not scheduled by the protocol

        @Override
        public void shutdown() { // shutdownNow: queued requests discarded, running ones interrupted
            consumeExecutorQueue.clear();
            listening.clear();
            shutdown = true;
        }

        @Override
        public void submitConsumeRequest(List<MessageExt> msgs, ProcessQueue pq, MessageQueue mq, boolean dispatchToConsume) {
            submit(msgs, pq, mq, consumer.factory.clock.now);
        }

        void submitConsumeRequestLater(List<MessageExt> msgs, ProcessQueue pq, MessageQueue mq) {
            submit(msgs, pq, mq, consumer.factory.clock.now + SUBMIT_LATER_DELAY);
        }

        private void submit(List<MessageExt> msgs, ProcessQueue pq, MessageQueue mq, long readyAt) {
            int batch = consumer.consumeMessageBatchMaxSize;
            for (int k = 0; k < msgs.size(); k += batch) {
                List<MessageExt> chunk = new ArrayList<>(msgs.subList(k, Math.min(k + batch, msgs.size())));
                consumeExecutorQueue.add(new Object[] {new ConsumeRequest(chunk, pq, mq), readyAt});
            }
        }

        @Override
        public Map<String, Object> startOne(MessageQueue mq) {
            for (Iterator<Object[]> it = consumeExecutorQueue.iterator(); it.hasNext(); ) {
                Object[] e = it.next();
                ConsumeRequest r = (ConsumeRequest) e[0];
                if ((Long) e[1] <= consumer.factory.clock.now && r.messageQueue.equals(mq)) {
                    it.remove();
                    Map<String, Object> result = new TreeMap<>();
                    result.put("ran", true);
                    result.put("listener", r.runUntilListener() ? listenerCall(r) : null);
                    return result;
                }
            }
            Map<String, Object> result = new TreeMap<>();
            result.put("ran", false);
            return result;
        }

        private Map<String, Object> listenerCall(ConsumeRequest r) {
            int call = nextCall++;
            listening.put(call, r);
            return callJson(call, r.messageQueue, r.msgs);
        }

        @Override
        public List<Object> listeningJson() {
            List<Object> out = new ArrayList<>();
            for (Map.Entry<Integer, ConsumeRequest> e : listening.entrySet()) out.add(callJson(e.getKey(), e.getValue().messageQueue, e.getValue().msgs));
            return out;
        }

        @Override
        public List<Object[]> queued() {
            List<Object[]> out = new ArrayList<>();
            for (Object[] e : consumeExecutorQueue) out.add(new Object[] {((ConsumeRequest) e[0]).messageQueue, e[1]});
            return out;
        }

        @Override
        public Map<String, Object> finishOne(MessageQueue mq, String status, int ackIndex) {
            Integer call = null;
            for (Map.Entry<Integer, ConsumeRequest> e : listening.entrySet()) {
                if (e.getValue().messageQueue.equals(mq)) {
                    call = e.getKey();
                    break;
                }
            }
            if (call == null) throw new ProtocolError("consume.finish: no listener call on that queue");
            if (!status.equals("CONSUME_SUCCESS") && !status.equals("RECONSUME_LATER")) {
                throw new ProtocolError("consume.finish: a concurrent status is CONSUME_SUCCESS or RECONSUME_LATER");
            }
            ConsumeRequest r = listening.remove(call);
            r.afterListener(status, ackIndex);
            Map<String, Object> result = new TreeMap<>();
            result.put("call", (long) call);
            result.put("next", null);
            return result;
        }

        /** ConsumeRequest, split where its thread would be parked in the listener. */
        final class ConsumeRequest {
            List<MessageExt> msgs;
            final ProcessQueue processQueue;
            final MessageQueue messageQueue;

            ConsumeRequest(List<MessageExt> msgs, ProcessQueue pq, MessageQueue mq) {
                this.msgs = msgs;
                this.processQueue = pq;
                this.messageQueue = mq;
            }

            /** run() up to the listener: false when it returns at once (its pq was dropped). */
            boolean runUntilListener() {
                if (processQueue.dropped) return false;
                // resetRetryAndNamespace: nothing to do, the scripted broker's messages carry no RETRY_TOPIC
                for (MessageExt m : msgs) m.properties.put("CONSUME_START_TIME", String.valueOf(consumer.factory.clock.now));
                return true;
            }

            /** The rest of run() after the listener returned: processConsumeResult unless dropped meanwhile. */
            void afterListener(String status, int ackIndex) {
                if (!processQueue.dropped) processConsumeResult(status, ackIndex, this);
            }
        }

        /** processConsumeResult: ackIndex, send-back (CLUSTERING) or drop (BROADCASTING), removeMessage, updateOffset. */
        void processConsumeResult(String status, int ackIndexSet, ConsumeRequest r) {
            if (r.msgs.isEmpty()) return;
            int ackIndex = ackIndexSet;
            if (status.equals("CONSUME_SUCCESS")) {
                if (ackIndex >= r.msgs.size()) ackIndex = r.msgs.size() - 1;
            } else {
                ackIndex = -1;
            }
            if (consumer.messageModel.equals("CLUSTERING")) {
                List<MessageExt> msgBackFailed = new ArrayList<>();
                for (int i = ackIndex + 1; i < r.msgs.size(); i++) {
                    MessageExt msg = r.msgs.get(i);
                    boolean result;
                    try {
                        consumer.sendMessageBack(msg, 0); // delayLevelWhenNextConsume
                        result = true;
                    } catch (RuntimeException e) {
                        result = false;
                    }
                    if (!result) {
                        msg.reconsumeTimes++;
                        msgBackFailed.add(msg);
                    }
                }
                if (!msgBackFailed.isEmpty()) {
                    List<MessageExt> rest = new ArrayList<>(r.msgs);
                    rest.removeAll(msgBackFailed);
                    r.msgs = rest;
                    submitConsumeRequestLater(msgBackFailed, r.processQueue, r.messageQueue);
                }
            } // BROADCASTING: the failed messages are dropped (logged)
            long offset = r.processQueue.removeMessage(r.msgs, consumer.factory.clock.now);
            if (offset >= 0 && !r.processQueue.dropped) {
                consumer.offsetStore.updateOffset(r.messageQueue, offset, true);
            }
        }
    }

    // ============================================================================================
    // ConsumeMessageOrderlyService
    // ============================================================================================

    static final class ConsumeMessageOrderlyService implements ConsumeMessageService {
        static final long REBALANCE_LOCK_INTERVAL = 20_000; // rocketmq.client.rebalance.lockInterval
        static final long LOCK_MQ_INITIAL_DELAY = 1_000;
        static final long MAX_TIME_CONSUME_CONTINUOUSLY = 60_000; // rocketmq.client.maxTimeConsumeContinuously
        static final long SUSPEND_CURRENT_QUEUE_TIME_MILLIS = 1_000;

        final DefaultMQPushConsumerImpl consumer;
        // DETERMINISM: the pool's work queue, {ConsumeRequest, Long readyAt}; the requests whose thread is
        // parked in its listener, by call number; MessageQueueLock's monitors, by the request holding them.
        final List<Object[]> consumeExecutorQueue = new ArrayList<>();
        final Map<Integer, ConsumeRequest> listening = new TreeMap<>();
        final Map<MessageQueue, ConsumeRequest> messageQueueLock = new HashMap<>();
        int nextCall;
        volatile boolean stopped;

        ConsumeMessageOrderlyService(DefaultMQPushConsumerImpl consumer) { this.consumer = consumer; }

        long now() { return consumer.factory.clock.now; }

        boolean clustering() { return consumer.messageModel.equals("CLUSTERING"); }

        @Override
        public void start() {
            if (clustering()) {
                consumer.factory.scheduledExecutorService.scheduleAtFixedRate("lockAll", () -> {
                    if (!stopped) {
                        try {
                            consumer.rebalanceImpl.lockAll();
                        } catch (RuntimeException e) {
                            // "lockMQPeriodically exception"
                        }
                    }
                }, LOCK_MQ_INITIAL_DELAY, REBALANCE_LOCK_INTERVAL);
            }
        }

        /** stopped; the lock renewal and pending re-locks go; the pool is shut down; CLUSTERING: unlockAll(false). */
        @Override
        public void shutdown() {
            stopped = true;
            consumer.factory.scheduledExecutorService.tasks.removeIf(t -> t.kind.equals("lockAll") || t.kind.equals("tryLockLater"));
            consumeExecutorQueue.clear();
            listening.clear(); // a thread inside its listener runs on, orphaned; the protocol no longer sees it
            if (clustering()) consumer.rebalanceImpl.unlockAll(false);
        }

        /** One request per pq, only when putMessage said dispatchToConsume. */
        @Override
        public void submitConsumeRequest(List<MessageExt> msgs, ProcessQueue pq, MessageQueue mq, boolean dispatchToConsume) {
            if (dispatchToConsume) consumeExecutorQueue.add(new Object[] {new ConsumeRequest(pq, mq), now()});
        }

        /** submitConsumeRequestLater: -1 means suspendCurrentQueueTimeMillis; clamped to [10 ms, 30 s]. */
        void submitConsumeRequestLater(ProcessQueue pq, MessageQueue mq, long suspendTimeMillis) {
            long timeMillis = suspendTimeMillis == -1 ? SUSPEND_CURRENT_QUEUE_TIME_MILLIS : suspendTimeMillis;
            timeMillis = Math.min(Math.max(timeMillis, 10), 30_000);
            consumeExecutorQueue.add(new Object[] {new ConsumeRequest(pq, mq), now() + timeMillis});
        }

        /** tryLockLaterAndReconsume: after delayMills, lockOneMQ, then the request 10 ms (locked) or 3 s later. */
        void tryLockLaterAndReconsume(final MessageQueue mq, final ProcessQueue pq, long delayMills) {
            consumer.factory.scheduledExecutorService.schedule("tryLockLater", mq, () -> {
                boolean lockOK = !stopped && consumer.rebalanceImpl.lock(mq);
                submitConsumeRequestLater(pq, mq, lockOK ? 10 : 3_000);
            }, delayMills);
        }

        @Override
        public Map<String, Object> startOne(MessageQueue mq) {
            Map<String, Object> result = new TreeMap<>();
            for (Iterator<Object[]> it = consumeExecutorQueue.iterator(); it.hasNext(); ) {
                Object[] e = it.next();
                ConsumeRequest r = (ConsumeRequest) e[0];
                // a pool thread only gets past synchronized (objLock) when no other thread holds it
                boolean canStart = r.processQueue.dropped || !messageQueueLock.containsKey(r.messageQueue);
                if ((Long) e[1] <= now() && r.messageQueue.equals(mq) && canStart) {
                    it.remove();
                    result.put("ran", true);
                    result.put("listener", r.start() ? listenerCall(r) : null);
                    return result;
                }
            }
            result.put("ran", false);
            return result;
        }

        private Map<String, Object> listenerCall(ConsumeRequest r) {
            int call = nextCall++;
            listening.put(call, r);
            return callJson(call, r.messageQueue, r.msgs);
        }

        @Override
        public Map<String, Object> finishOne(MessageQueue mq, String status, int ackIndex) {
            Integer call = null;
            for (Map.Entry<Integer, ConsumeRequest> e : listening.entrySet()) {
                if (e.getValue().messageQueue.equals(mq)) {
                    call = e.getKey();
                    break;
                }
            }
            if (call == null) throw new ProtocolError("consume.finish: no listener call on that queue");
            if (!status.equals("SUCCESS") && !status.equals("SUSPEND_CURRENT_QUEUE_A_MOMENT")) {
                throw new ProtocolError("consume.finish: an orderly status is SUCCESS or SUSPEND_CURRENT_QUEUE_A_MOMENT");
            }
            ConsumeRequest r = listening.remove(call);
            Map<String, Object> result = new TreeMap<>();
            result.put("call", (long) call);
            result.put("next", r.listenerReturned(status) ? listenerCall(r) : null);
            return result;
        }

        @Override
        public List<Object> listeningJson() {
            List<Object> out = new ArrayList<>();
            for (Map.Entry<Integer, ConsumeRequest> e : listening.entrySet()) out.add(callJson(e.getKey(), e.getValue().messageQueue, e.getValue().msgs));
            return out;
        }

        @Override
        public List<Object[]> queued() {
            List<Object[]> out = new ArrayList<>();
            for (Object[] e : consumeExecutorQueue) out.add(new Object[] {((ConsumeRequest) e[0]).messageQueue, e[1]});
            return out;
        }

        /**
         * ConsumeRequest.run, cut where its thread is parked in the listener: start() runs to the first
         * listener call, listenerReturned() from its return to the next call. Both answer whether the
         * thread is in the listener now (holding the queue's monitor and the pq's consumeLock) or ended.
         */
        final class ConsumeRequest {
            final ProcessQueue processQueue;
            final MessageQueue messageQueue;
            List<MessageExt> msgs = new ArrayList<>();
            long beginTime;

            ConsumeRequest(ProcessQueue pq, MessageQueue mq) {
                this.processQueue = pq;
                this.messageQueue = mq;
            }

            boolean start() {
                if (processQueue.dropped) return false; // "because it's dropped"
                messageQueueLock.put(messageQueue, this); // synchronized (objLock)
                if (!clustering() || (processQueue.locked && !processQueue.isLockExpired(now()))) {
                    beginTime = now();
                    return loop();
                }
                tryLockLaterAndReconsume(messageQueue, processQueue, 100);
                return end();
            }

            /** The for-loop of run(), from its top. */
            private boolean loop() {
                while (true) {
                    if (processQueue.dropped) break;
                    if (clustering() && !processQueue.locked) {
                        tryLockLaterAndReconsume(messageQueue, processQueue, 10);
                        break;
                    }
                    if (clustering() && processQueue.isLockExpired(now())) {
                        tryLockLaterAndReconsume(messageQueue, processQueue, 10);
                        break;
                    }
                    if (now() - beginTime > MAX_TIME_CONSUME_CONTINUOUSLY) {
                        submitConsumeRequestLater(processQueue, messageQueue, 10);
                        break;
                    }
                    List<MessageExt> taken = processQueue.takeMessages(consumer.consumeMessageBatchMaxSize, now());
                    if (taken.isEmpty()) break; // continueConsume = false
                    processQueue.consumeLockHeld = true; // consumeLock.lock()
                    if (processQueue.dropped) {
                        processQueue.consumeLockHeld = false;
                        break;
                    }
                    msgs = taken;
                    return true; // DETERMINISM: parked in messageListener.consumeMessage until consume.finish
                }
                return end();
            }

            boolean listenerReturned(String status) {
                processQueue.consumeLockHeld = false; // consumeLock.unlock()
                if (!processConsumeResult(msgs, status, this)) return end();
                return loop();
            }

            private boolean end() {
                if (messageQueueLock.get(messageQueue) == this) messageQueueLock.remove(messageQueue);
                return false;
            }
        }

        /** processConsumeResult with autoCommit: SUCCESS commits; SUSPEND reconsumes unless every message is forwarded. */
        boolean processConsumeResult(List<MessageExt> msgs, String status, ConsumeRequest r) {
            boolean continueConsume = true;
            long commitOffset = -1L;
            if (status.equals("SUSPEND_CURRENT_QUEUE_A_MOMENT")) {
                if (checkReconsumeTimes(msgs)) {
                    r.processQueue.makeMessageToConsumeAgain(msgs);
                    submitConsumeRequestLater(r.processQueue, r.messageQueue, -1);
                    continueConsume = false;
                } else {
                    commitOffset = r.processQueue.commit();
                }
            } else {
                commitOffset = r.processQueue.commit();
            }
            if (commitOffset >= 0 && !r.processQueue.dropped) {
                consumer.offsetStore.updateOffset(r.messageQueue, commitOffset, false);
            }
            return continueConsume;
        }

        int getMaxReconsumeTimes() { return consumer.maxReconsumeTimes == -1 ? Integer.MAX_VALUE : consumer.maxReconsumeTimes; }

        /** true (suspend) when a message stays: below the maximum, or at it with a failed forward. */
        private boolean checkReconsumeTimes(List<MessageExt> msgs) {
            boolean suspend = false;
            for (MessageExt msg : msgs) {
                if (msg.reconsumeTimes >= getMaxReconsumeTimes()) {
                    if (!sendMessageBack(msg)) {
                        suspend = true;
                        msg.reconsumeTimes++;
                    }
                } else {
                    suspend = true;
                    msg.reconsumeTimes++;
                }
            }
            return suspend;
        }

        /** The inner producer forwards the message to %RETRY%<group> (RECONSUME_TIME = reconsumeTimes in 4.9.8). */
        private boolean sendMessageBack(MessageExt msg) {
            String originMsgId = msg.properties.get("ORIGIN_MESSAGE_ID");
            String origin = originMsgId == null || originMsgId.isEmpty() ? msg.msgId : originMsgId;
            try {
                consumer.factory.mqClientAPIImpl.sendMessage(retryTopic(consumer.consumerGroup), origin,
                        3 + msg.reconsumeTimes, msg.reconsumeTimes);
                return true;
            } catch (RuntimeException e) {
                return false;
            }
        }
    }

    // ============================================================================================
    // The protocol: every consumer of a sequence, the shared clock and the scripted broker
    // ============================================================================================

    static final class World {
        final VirtualClock clock = new VirtualClock();
        final Map<String, DefaultMQPushConsumerImpl> consumers = new HashMap<>();
        final Map<String, ScriptedRemotingClient> remotings = new HashMap<>();
        final Map<String, List<String>> consumerLists = new HashMap<>();
        final Map<String, Map<MessageQueue, Long>> files = new HashMap<>(); // the local offset files
        List<Object> sent = new ArrayList<>();
        Map<String, Deque<Object>> answers = new HashMap<>();

        DefaultMQPushConsumerImpl consumer(Map<String, Object> args) {
            DefaultMQPushConsumerImpl c = consumers.get((String) args.get("consumer"));
            if (c == null) throw new ProtocolError("no consumer named " + args.get("consumer"));
            return c;
        }

        Map<String, Object> handle(String op, Map<String, Object> args) {
            sent = new ArrayList<>();
            answers = new HashMap<>();
            Object given = args.get("answers");
            if (given != null) {
                for (Map.Entry<String, Object> e : obj(given).entrySet()) answers.put(e.getKey(), new ArrayDeque<>(list(e.getValue())));
            }
            Map<String, Object> result = new TreeMap<>();
            switch (op) {
                case "consumer.new": {
                    String name = (String) args.get("consumer");
                    if (name == null || consumers.containsKey(name)) throw new ProtocolError("consumer.new: not a new name");
                    ScriptedRemotingClient remoting = new ScriptedRemotingClient(this);
                    MQClientInstance factory = new MQClientInstance((String) args.get("clientId"), clock, remoting);
                    consumers.put(name, new DefaultMQPushConsumerImpl(factory, args, files));
                    remotings.put(name, remoting);
                    break;
                }
                case "consumer.start":
                    consumer(args).start();
                    break;
                case "consumer.shutdown":
                    consumer(args).shutdown();
                    break;
                case "cluster.consumers": {
                    List<String> ids = new ArrayList<>();
                    for (Object o : list(args.get("clientIds"))) ids.add((String) o);
                    consumerLists.put((String) args.get("group"), ids);
                    break;
                }
                case "time.advance": {
                    long ms = num(args.get("ms"));
                    if (ms < 0) throw new ProtocolError("time.advance: ms must not be negative");
                    clock.now += ms;
                    result.put("now", clock.now);
                    break;
                }
                case "consumer.run":
                    result.put("ran", run(consumer(args), (String) args.get("task"), args.get("mq")));
                    break;
                case "pull.reply":
                    result.put("pull", (long) pullReply(args));
                    break;
                case "consume.start": {
                    DefaultMQPushConsumerImpl c = consumer(args);
                    if (!c.serviceState.equals("RUNNING")) result.put("ran", false);
                    else result = c.consumeMessageService.startOne(MessageQueue.of(args.get("mq")));
                    break;
                }
                case "consume.finish": {
                    DefaultMQPushConsumerImpl c = consumer(args);
                    int ackIndex = (int) num(args.getOrDefault("ackIndex", (long) Integer.MAX_VALUE));
                    result = c.consumeMessageService.finishOne(MessageQueue.of(args.get("mq")), (String) args.get("status"), ackIndex);
                    break;
                }
                case "consumer.observe":
                    result = observe(consumer(args), remotings.get((String) args.get("consumer")));
                    break;
                default:
                    throw new UnsupportedOperationException(op);
            }
            return result;
        }

        /** consumer.run: run the named task if it is due now. */
        boolean run(DefaultMQPushConsumerImpl c, String task, Object mqJson) {
            if (!c.serviceState.equals("RUNNING")) return false;
            MQClientInstance f = c.factory;
            switch (task) {
                case "rebalance":
                    if (!f.rebalanceService.isDue()) return false;
                    f.rebalanceService.runOnce();
                    return true;
                case "pull": {
                    PullRequest r = f.pullMessageService.take(MessageQueue.of(mqJson));
                    if (r == null) return false;
                    c.pullMessage(r);
                    return true;
                }
                case "persistOffsets": {
                    ScheduledTask t = f.scheduledExecutorService.find("persistOffsets");
                    if (t == null || t.due > clock.now) return false;
                    f.scheduledExecutorService.runDue(t);
                    return true;
                }
                case "fixOffset":
                case "tryLockLater":
                case "unlockDelay": {
                    MessageQueue mq = MessageQueue.of(mqJson);
                    ScheduledTask first = null;
                    for (ScheduledTask t : f.scheduledExecutorService.tasks) {
                        if (t.kind.equals(task) && t.mq.equals(mq) && t.due <= clock.now && (first == null || t.due < first.due)) first = t;
                    }
                    if (first == null) return false;
                    f.scheduledExecutorService.runDue(first);
                    return true;
                }
                case "lockAll": {
                    ScheduledTask t = f.scheduledExecutorService.find("lockAll");
                    if (t == null || t.due > clock.now) return false;
                    f.scheduledExecutorService.runDue(t);
                    return true;
                }
                default:
                    throw new ProtocolError("consumer.run: unknown task " + task);
            }
        }

        int pullReply(Map<String, Object> args) {
            DefaultMQPushConsumerImpl c = consumer(args);
            ScriptedRemotingClient remoting = remotings.get((String) args.get("consumer"));
            MessageQueue mq = MessageQueue.of(args.get("mq"));
            PendingPull pull = null;
            for (PendingPull p : remoting.pulls) {
                if (p.mq.equals(mq)) {
                    pull = p;
                    break;
                }
            }
            if (pull == null || !c.serviceState.equals("RUNNING")) throw new ProtocolError("pull.reply: no pull of that queue waiting");
            Map<String, Object> answer = obj(args.get("answer"));
            remoting.pulls.remove(pull);
            c.pullsInFlight.remove(pull.callback);
            // MQClientAPIImpl.processPullResponse: response code to PullStatus; any other code throws
            if (Boolean.TRUE.equals(answer.get("timeout"))) {
                pull.callback.onException(new RemotingTimeoutException("wait response timeout"));
            } else if (answer.containsKey("responseCode")) {
                pull.callback.onException(new MQBrokerException((int) num(answer.get("responseCode"))));
            } else {
                String status = (String) answer.get("status");
                if (!List.of("FOUND", "NO_NEW_MSG", "NO_MATCHED_MSG", "OFFSET_ILLEGAL").contains(status)) {
                    throw new ProtocolError("pull.reply: unknown status " + status);
                }
                List<MessageExt> msgs = new ArrayList<>();
                if (status.equals("FOUND") && answer.get("msgs") != null) {
                    for (Object o : list(answer.get("msgs"))) msgs.add(new MessageExt(pull.header.topic, pull.header.queueId, num(o)));
                }
                pull.callback.onSuccess(new PullResult(status, num(answer.get("nextBeginOffset")),
                        num(answer.getOrDefault("minOffset", 0L)), num(answer.getOrDefault("maxOffset", 0L)), msgs));
            }
            return pull.number;
        }

        /** consumer.observe: what the consumer holds now. Lists in the protocol's order. */
        Map<String, Object> observe(DefaultMQPushConsumerImpl c, ScriptedRemotingClient remoting) {
            Map<String, Object> out = new TreeMap<>();
            if (!c.serviceState.equals("RUNNING")) {
                out.put("running", false);
                return out;
            }
            out.put("running", true);
            MQClientInstance f = c.factory;
            // each pq's pull cursor, wherever its PullRequest is: queued, on the wire, in an OFFSET_ILLEGAL task
            Map<ProcessQueue, Long> cursors = new HashMap<>();
            for (Object[] e : f.pullMessageService.pullRequestQueue) cursors.put(((PullRequest) e[0]).processQueue, ((PullRequest) e[0]).nextOffset);
            for (PullRequest r : c.pullsInFlight.values()) cursors.put(r.processQueue, r.nextOffset);
            for (ScheduledTask t : f.scheduledExecutorService.tasks) {
                if (t.task instanceof DefaultMQPushConsumerImpl.FixOffsetTask) {
                    PullRequest r = ((DefaultMQPushConsumerImpl.FixOffsetTask) t.task).pullRequest;
                    cursors.put(r.processQueue, r.nextOffset);
                }
            }
            List<Object> owned = new ArrayList<>(), pqs = new ArrayList<>(), offsets = new ArrayList<>();
            for (Map.Entry<MessageQueue, ProcessQueue> e : c.rebalanceImpl.processQueueTable.entrySet()) {
                owned.add(e.getKey().toJson());
                ProcessQueue pq = e.getValue();
                Map<String, Object> m = new TreeMap<>();
                m.put("mq", e.getKey().toJson());
                m.put("dropped", pq.dropped);
                m.put("locked", pq.locked);
                m.put("cached", new ArrayList<Object>(pq.msgTreeMap.keySet()));
                m.put("inFlight", new ArrayList<Object>(pq.consumingMsgOrderlyTreeMap.keySet()));
                m.put("nextOffset", cursors.get(pq));
                pqs.add(m);
            }
            for (Map.Entry<MessageQueue, Long> e : c.offsetStore.cloneOffsetTable().entrySet()) {
                Map<String, Object> m = new TreeMap<>();
                m.put("mq", e.getKey().toJson());
                m.put("offset", e.getValue());
                offsets.add(m);
            }
            List<Object> pulls = new ArrayList<>();
            for (PendingPull p : remoting.pulls) pulls.add((long) p.number);
            List<Object> listening = c.consumeMessageService.listeningJson();
            List<Object> tasks = new ArrayList<>();
            if (!f.rebalanceService.stopped) tasks.add(task("rebalance", null, f.rebalanceService.dueTime()));
            for (ScheduledTask t : f.scheduledExecutorService.tasks) tasks.add(task(t.kind, t.mq, t.due));
            for (Object[] e : f.pullMessageService.pullRequestQueue) {
                PullRequest r = (PullRequest) e[0];
                if (!r.processQueue.dropped) tasks.add(task("pull", r.messageQueue, (Long) e[1]));
            }
            for (Object[] e : c.consumeMessageService.queued()) tasks.add(task("consume", (MessageQueue) e[0], (Long) e[1]));
            sortByJson(owned);
            sortByJson(offsets);
            sortByJson(tasks);
            out.put("owned", owned);
            out.put("offsets", offsets);
            out.put("pqs", pqs); // by MessageQueue (the table's order)
            out.put("pulls", pulls);
            out.put("listening", listening); // by call number
            out.put("tasks", tasks);
            return out;
        }

        static Map<String, Object> task(String name, MessageQueue mq, long due) {
            Map<String, Object> m = new TreeMap<>();
            m.put("task", name);
            if (mq != null) m.put("mq", mq.toJson());
            m.put("due", due);
            return m;
        }

        static void sortByJson(List<Object> l) { l.sort(Comparator.comparing(Json::write)); }
    }

    // ============================================================================================
    // The protocol loop
    // ============================================================================================

    static World world = new World();

    static Map<String, Object> handle(String op, Map<String, Object> args) {
        Map<String, Object> result = new TreeMap<>();
        switch (op) {
            case "hello":
                result.put("protocol", 2L);
                result.put("implementation", "docs/examples/RmqspecConsumerAdapter.java");
                result.put("version", "4.9.8");
                result.put("components", List.of("pushConsumer", "pushConsumer.orderly"));
                result.put("strategies", List.of("AVG", "AVG_BY_CIRCLE"));
                return result;
            case "reset":
                world = new World(); // every consumer, the clock and the local offset files
                return result;
            default:
                return world.handle(op, args);
        }
    }

    public static void main(String[] argv) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Map<String, Object> request = obj(new Json(line).value());
            Map<String, Object> reply = new TreeMap<>();
            reply.put("id", request.get("id"));
            String op = (String) request.get("op");
            try {
                Map<String, Object> args = request.get("args") == null ? Map.of() : obj(request.get("args"));
                reply.put("result", handle(op, args));
                reply.put("ok", true);
                reply.put("sent", world.sent);
            } catch (UnsupportedOperationException e) {
                Map<String, Object> unsupported = new TreeMap<>();
                unsupported.put("reason", "not implemented by this example");
                reply.put("ok", false);
                reply.put("unsupported", unsupported);
            } catch (RuntimeException e) { // a Java exception of the client: report its class
                Map<String, Object> error = new TreeMap<>();
                error.put("type", e instanceof ClassCastException || e instanceof NullPointerException ? "ProtocolError" : e.getClass().getSimpleName());
                error.put("message", op + ": " + e.getMessage());
                reply.put("ok", false);
                reply.put("error", error);
                reply.put("sent", world.sent);
            }
            out.println(Json.write(reply));
            out.flush();
        }
    }

    @SuppressWarnings("unchecked")
    static Map<String, Object> obj(Object o) { return (Map<String, Object>) o; }

    @SuppressWarnings("unchecked")
    static List<Object> list(Object o) { return (List<Object>) o; }

    static long num(Object o) { return ((Number) o).longValue(); }

    /** Just enough JSON for the protocol. write() is compact with sorted keys (Python's json.dumps(sort_keys=True)). */
    static final class Json {
        final String s;
        int i;

        Json(String s) { this.s = s; }

        Object value() {
            skip();
            char c = s.charAt(i);
            if (c == '{') {
                Map<String, Object> m = new LinkedHashMap<>();
                i++;
                skip();
                if (s.charAt(i) == '}') { i++; return m; }
                while (true) {
                    skip();
                    String k = (String) value();
                    skip();
                    i++; // ':'
                    m.put(k, value());
                    skip();
                    if (s.charAt(i++) == '}') return m;
                }
            }
            if (c == '[') {
                List<Object> l = new ArrayList<>();
                i++;
                skip();
                if (s.charAt(i) == ']') { i++; return l; }
                while (true) {
                    l.add(value());
                    skip();
                    if (s.charAt(i++) == ']') return l;
                }
            }
            if (c == '"') {
                StringBuilder b = new StringBuilder();
                i++;
                while (s.charAt(i) != '"') {
                    char ch = s.charAt(i++);
                    if (ch == '\\') {
                        char e = s.charAt(i++);
                        switch (e) {
                            case 'n': b.append('\n'); break;
                            case 't': b.append('\t'); break;
                            case 'r': b.append('\r'); break;
                            case 'b': b.append('\b'); break;
                            case 'f': b.append('\f'); break;
                            case 'u': b.append((char) Integer.parseInt(s.substring(i, i + 4), 16)); i += 4; break;
                            default: b.append(e);
                        }
                    } else {
                        b.append(ch);
                    }
                }
                i++;
                return b.toString();
            }
            if (s.startsWith("true", i)) { i += 4; return Boolean.TRUE; }
            if (s.startsWith("false", i)) { i += 5; return Boolean.FALSE; }
            if (s.startsWith("null", i)) { i += 4; return null; }
            int start = i;
            while (i < s.length() && "-0123456789".indexOf(s.charAt(i)) >= 0) i++;
            return Long.parseLong(s.substring(start, i));
        }

        void skip() { while (i < s.length() && Character.isWhitespace(s.charAt(i))) i++; }

        static String write(Object o) {
            if (o == null) return "null";
            if (o instanceof String) {
                StringBuilder b = new StringBuilder("\"");
                for (char ch : ((String) o).toCharArray()) {
                    if (ch == '"' || ch == '\\') b.append('\\').append(ch);
                    else if (ch < 0x20 || ch > 0x7e) b.append(String.format("\\u%04x", (int) ch));
                    else b.append(ch);
                }
                return b.append('"').toString();
            }
            if (o instanceof Map) {
                StringBuilder b = new StringBuilder("{");
                for (Map.Entry<?, ?> e : new TreeMap<>((Map<?, ?>) o).entrySet()) {
                    if (b.length() > 1) b.append(',');
                    b.append(write(e.getKey())).append(':').append(write(e.getValue()));
                }
                return b.append('}').toString();
            }
            if (o instanceof List) {
                StringBuilder b = new StringBuilder("[");
                for (Object x : (List<?>) o) {
                    if (b.length() > 1) b.append(',');
                    b.append(write(x));
                }
                return b.append(']').toString();
            }
            return String.valueOf(o); // Long, Integer, Boolean
        }
    }
}

/*
 * Where this example follows the reference rather than 4.9.8: the fall-back of
 * DefaultMQPushConsumerImpl#sendMessageBack. 4.9.8 builds the copy with
 * MessageAccessor.setOriginMessageId(newMsg, ...) and then MessageAccessor.setProperties(newMsg,
 * msg.getProperties()), which replaces newMsg's property map by the original message's, so the
 * ORIGIN_MESSAGE_ID just set is lost (the SEND_MESSAGE carries none for a message that was never sent
 * back before) and the RETRY_TOPIC, RECONSUME_TIME, MAX_RECONSUME_TIMES and DELAY properties land in the
 * consumed message's own map. And getDefaultMQProducer().send(newMsg) is a synchronous send with
 * retryTimesWhenSendFailed = 2: DefaultMQProducerImpl#sendDefaultImpl sends up to three times when the
 * broker answers a code of retryResponseCodes (SYSTEM_ERROR 1, TOPIC_NOT_EXIST, SERVICE_NOT_AVAILABLE,
 * NO_PERMISSION, ...) or the send fails fast with a RemotingException (a timeout uses up the 3 s
 * sendMsgTimeout, so it is not retried). The reference
 * (reference/default_mq_push_consumer_impl.py, send_message_back) reports ORIGIN_MESSAGE_ID = the msgId
 * and sends once; so does sendMessageBack above, so that the two agree.
 */
