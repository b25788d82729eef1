/*
 * An example rmqspec adapter in Java: the adapter protocol of docs/oracle.md ("Live conformance")
 * around a small client implementation of two components, allocate (AVG and AVG_BY_CIRCLE) and
 * processQueue (concurrent ProcessQueue: put, remove, state).
 *
 * It is the template for wrapping a real client: replace the two inner classes by calls into your
 * own classes. No dependencies; run it with the JDK's single-file launcher:
 *
 *     rmqspec conform --sut "java docs/examples/RmqspecAdapter.java"
 *
 * The JSON reader and writer below cover exactly what the protocol uses (objects, arrays, strings,
 * integers, booleans, null).
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;

public class RmqspecAdapter {

    /** The component under test: queue allocation (R11.0-R11.2). */
    static final class Allocation {
        static List<Object> allocate(String strategy, String currentCid, List<Object> mqAll, List<Object> cidAll) {
            if (currentCid == null || currentCid.isEmpty()) throw new IllegalArgumentException("currentCID is empty");
            if (mqAll == null || mqAll.isEmpty()) throw new IllegalArgumentException("mqAll is null or mqAll empty");
            if (cidAll == null || cidAll.isEmpty()) throw new IllegalArgumentException("cidAll is null or cidAll empty");
            List<Object> result = new ArrayList<>();
            int index = cidAll.indexOf(currentCid);
            if (index < 0) return result; // logged as "[BUG] ... not in cidAll" by RocketMQ
            int n = mqAll.size(), c = cidAll.size();
            if (strategy.equals("AVG_BY_CIRCLE")) {
                for (int i = index; i < n; i += c) result.add(mqAll.get(i));
                return result;
            }
            int mod = n % c;
            int size = n <= c ? 1 : (mod > 0 && index < mod ? n / c + 1 : n / c);
            int start = (mod > 0 && index < mod) ? index * size : index * size + mod;
            for (int i = 0; i < Math.min(size, n - start); i++) result.add(mqAll.get((start + i) % n));
            return result;
        }
    }

    /** The component under test: a concurrent ProcessQueue (R6.1-R6.3). */
    static final class ProcessQueue {
        final TreeMap<Long, Long> tree = new TreeMap<>(); // queue offset -> body size
        long msgCount, msgSize, queueOffsetMax, msgAccCnt;
        boolean consuming;

        boolean put(List<Object> msgs) {
            long valid = 0;
            for (Object o : msgs) {
                Map<String, Object> m = obj(o);
                long offset = num(m.get("queueOffset")), size = num(m.get("bodySize"));
                if (tree.put(offset, size) == null) {
                    valid++;
                    queueOffsetMax = offset;
                    msgSize += size;
                }
            }
            msgCount += valid;
            boolean dispatch = false;
            if (!tree.isEmpty() && !consuming) {
                dispatch = true;
                consuming = true;
            }
            if (!msgs.isEmpty()) {
                Map<String, Object> last = obj(msgs.get(msgs.size() - 1));
                Object max = last.get("maxOffset");
                if (max != null && num(max) - num(last.get("queueOffset")) > 0) msgAccCnt = num(max) - num(last.get("queueOffset"));
            }
            return dispatch;
        }

        long remove(List<Object> msgs) {
            if (tree.isEmpty()) return -1;
            long result = queueOffsetMax + 1, removed = 0;
            for (Object o : msgs) {
                Map<String, Object> m = obj(o);
                if (tree.remove(num(m.get("queueOffset"))) != null) {
                    removed++;
                    msgSize -= num(m.get("bodySize"));
                }
            }
            msgCount -= removed;
            if (msgCount == 0) msgSize = 0;
            if (!tree.isEmpty()) result = tree.firstKey();
            return result;
        }

        Map<String, Object> state() {
            Map<String, Object> s = new LinkedHashMap<>();
            s.put("msgCount", msgCount);
            s.put("msgSize", msgSize);
            s.put("queueOffsetMax", queueOffsetMax);
            s.put("maxSpan", tree.isEmpty() ? 0L : tree.lastKey() - tree.firstKey());
            s.put("msgAccCnt", msgAccCnt);
            s.put("consuming", consuming);
            s.put("cached", new ArrayList<Object>(tree.keySet()));
            s.put("inFlight", new ArrayList<Object>());
            return s;
        }
    }

    // --- the protocol loop ----------------------------------------------------------------------
    static final Map<String, ProcessQueue> pqs = new HashMap<>();

    static Map<String, Object> handle(String op, Map<String, Object> args) {
        Map<String, Object> result = new LinkedHashMap<>();
        switch (op) {
            case "hello":
                result.put("protocol", 1L);
                result.put("implementation", "docs/examples/RmqspecAdapter.java");
                result.put("version", "4.9.8");
                result.put("components", List.of("allocate", "processQueue"));
                result.put("strategies", List.of("AVG", "AVG_BY_CIRCLE"));
                break;
            case "reset":
                pqs.clear();
                break;
            case "allocate":
                result.put("queues", Allocation.allocate((String) args.get("strategy"), (String) args.get("currentCID"),
                        list(args.get("mqAll")), list(args.get("cidAll"))));
                break;
            case "pq.new":
                pqs.put((String) args.get("pq"), new ProcessQueue());
                break;
            case "pq.put":
                result.put("dispatchToConsume", pqs.get((String) args.get("pq")).put(list(args.get("msgs"))));
                break;
            case "pq.remove":
                result.put("offset", pqs.get((String) args.get("pq")).remove(list(args.get("msgs"))));
                break;
            case "pq.state":
                result = pqs.get((String) args.get("pq")).state();
                break;
            default:
                throw new UnsupportedOperationException("op " + op);
        }
        return result;
    }

    public static void main(String[] argv) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintStream out = new PrintStream(System.out, false, StandardCharsets.UTF_8);
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) continue;
            Map<String, Object> request = obj(new Json(line).value());
            Map<String, Object> reply = new LinkedHashMap<>();
            reply.put("id", request.get("id"));
            try {
                Map<String, Object> args = request.get("args") == null ? Map.of() : obj(request.get("args"));
                reply.put("result", handle((String) request.get("op"), args));
                reply.put("ok", true);
            } catch (RuntimeException e) { // a Java exception of the method under test: report its class
                Map<String, Object> error = new LinkedHashMap<>();
                error.put("type", e.getClass().getSimpleName());
                error.put("message", String.valueOf(e.getMessage()));
                reply.put("ok", false);
                reply.put("error", error);
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

    /** Just enough JSON for the protocol. */
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
                    else if (ch < 0x20) b.append(String.format("\\u%04x", (int) ch));
                    else b.append(ch);
                }
                return b.append('"').toString();
            }
            if (o instanceof Map) {
                StringBuilder b = new StringBuilder("{");
                for (Map.Entry<?, ?> e : ((Map<?, ?>) o).entrySet()) {
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
            return String.valueOf(o); // Long, Boolean
        }
    }
}
