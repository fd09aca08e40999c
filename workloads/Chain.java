// A Java workload with a known call chain for the JIT stack tests: main -> level1 -> level2 ->
// level3, each kept out of line (run with -XX:CompileCommand=dontinline,Chain::level*), level3
// allocating arrays whose first touch faults in fresh heap pages.
// usage: java Chain [MEGABYTES=256]
public class Chain {
    static long sink;

    static long[] level3(int words) {
        long[] a = new long[words];
        a[words - 1] = words;
        return a;
    }

    static long level2(int words) {
        return level3(words)[words - 1];
    }

    static long level1(int words) {
        return level2(words) + 1;
    }

    public static void main(String[] args) {
        int megabytes = args.length > 0 ? Integer.parseInt(args[0]) : 256;
        // 64 KiB arrays: allocated in the young generation, zeroed by the compiled code and the
        // runtime, first touched there.
        int words = 8192;
        long rounds = (long) megabytes * 1024 * 1024 / (words * 8);
        for (long i = 0; i < rounds; i++) {
            sink += level1(words);
        }
        System.out.println(sink);
    }
}
