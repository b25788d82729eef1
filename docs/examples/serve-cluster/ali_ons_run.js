'use strict';
// Produce N messages and consume them with npm's ali-ons against serve-cluster.
//
//   NODE_PATH=<dir>/node_modules node ali_ons_run.js NAMESRV N DELIVERIES LISTENER_JS [INSTANCE] [TIMEOUT_S] [WORK_MS] [EXPECT] [LINGER_S] [FAIL_OFFSETS]
//
// LISTENER_JS is rmqspec's src/rmqspec/cluster/listener.js; INSTANCE (default c1) may list several
// consumers of the group, c1,c2, which then write to the same DELIVERIES file. Prints `sent N SECONDS`
// and `consumed K`; exits 0 when all N (or EXPECT) were consumed before the timeout, 1 otherwise. With
// LINGER_S the consumers keep running that many seconds after that (a fault may come meanwhile).
// FAIL_OFFSETS (o1,o2,...): the first delivery of those offsets of T fails (the handler throws), so the
// consumer sends them back. A message pulled from %RETRY%G reaches the handler with the topic it was first
// sent to (ali-ons resets it, as 4.9.8's resetRetryTopic) and the retry queue's id and offset; its
// RETRY_TOPIC property tells it apart, and the listener records it under %RETRY%G.
const { Producer, Consumer, Message } = require('ali-ons');

const [ namesrv, nText, deliveriesPath, listenerJs, instance = 'c1', timeoutText = '60', workText = '0', expectText, lingerText = '0', failText = '' ] = process.argv.slice(2);
const { DeliveryLog } = require(listenerJs);
const n = Number(nText);
const failing = new Set(failText.split(',').filter(o => o !== '').map(Number));
const expected = expectText === undefined || expectText === '' ? n : Number(expectText);

async function main() {
  // ali-ons asks an HTTP address server for the name servers unless nameSrv is set; it still wants a client.
  const httpclient = { async request() { throw new Error('no address server: nameSrv is set'); } };
  const common = { nameSrv: namesrv, httpclient, accessKeyId: 'key', accessKeySecret: 'secret' };
  const producer = new Producer(Object.assign({ producerGroup: 'PG' }, common));
  await producer.ready();
  let started = Date.now();
  for (let i = 0; i < n; i++) {
    await producer.send(new Message('T', 'a', 'm' + i));
  }
  console.log('sent', n, (Date.now() - started) / 1000);
  await producer.close();

  const seen = new Set();
  let finish;
  const finished = new Promise(resolve => { finish = resolve; });
  const consumers = [];
  started = Date.now();
  for (const name of instance.split(',')) { // INSTANCE may name several consumers of the group: c1,c2
    const deliveries = new DeliveryLog(deliveriesPath, name);
    const consumer = new Consumer(Object.assign({
      consumerGroup: 'G', instanceName: name, consumeFromWhere: 'CONSUME_FROM_FIRST_OFFSET',
    }, common));
    consumer.subscribe('T', '*', async msg => {
      await new Promise(resolve => setTimeout(resolve, Number(workText))); // the application's work
      const retried = Boolean(msg.properties && msg.properties.RETRY_TOPIC);
      const topic = retried ? '%RETRY%G' : msg.topic;
      if (!retried && failing.delete(Number(msg.queueOffset))) {
        deliveries.record(topic, msg.queueId, msg.queueOffset, 'failure');
        throw new Error('the listener fails offset ' + msg.queueOffset);
      }
      deliveries.record(topic, msg.queueId, msg.queueOffset);
      seen.add(topic + ':' + msg.queueId + ':' + msg.queueOffset);
      if (seen.size >= expected) finish(true);
    });
    await consumer.ready();
    consumers.push([ consumer, deliveries ]);
  }
  const timer = setTimeout(() => finish(false), Number(timeoutText) * 1000);
  const ok = await finished;
  clearTimeout(timer);
  console.log('consumed', seen.size, (Date.now() - started) / 1000);
  await new Promise(resolve => setTimeout(resolve, Number(lingerText) * 1000));
  // ali-ons moves its offset after the handler returns; the last handler resolved `finished` from inside
  await new Promise(resolve => setTimeout(resolve, 500));
  for (const [ consumer, deliveries ] of consumers) {
    await consumer.close();
    deliveries.close();
  }
  return ok;
}

main().then(ok => process.exit(ok ? 0 : 1), err => { console.error(err); process.exit(1); });
