// A JVM workload for far memory: a heap of MiB megabytes written and read back, in 1 MiB
// arrays that young collections copy and old ones keep, half of it dropped and allocated
// again (the collector reuses and uncommits space). It prints a checksum of everything read;
// any byte that did not come back changes it, and a wrong value ends it with status 1.
// usage: java HeapRoundTrip MiB
public class HeapRoundTrip {
    static long value(int i, int j, long seed) {
        return (i * 0x9E3779B97F4A7C15L ^ j * 0xBF58476D1CE4E5B9L) + seed;
    }

    static long[] chunk(int i, long seed) {
        long[] c = new long[1 << 17];
        for (int j = 0; j < c.length; j++) c[j] = value(i, j, seed);
        return c;
    }

    static long check(long[][] chunks, int from, long seed) {
        long sum = 0;
        for (int i = from; i < chunks.length; i++)
            for (int j = 0; j < chunks[i].length; j++) {
                long v = chunks[i][j];
                if (v != value(i, j, i < chunks.length / 2 ? seed + 1 : seed)) {
                    System.out.println("bad chunk " + i + " word " + j);
                    System.exit(1);
                }
                sum += v;
            }
        return sum;
    }

    public static void main(String[] args) {
        int mb = Integer.parseInt(args[0]);
        long[][] chunks = new long[mb][];
        for (int i = 0; i < mb; i++) chunks[i] = chunk(i, 2);
        // The first half again, with another seed: the old arrays become garbage.
        for (int i = 0; i < mb / 2; i++) chunks[i] = chunk(i, 3);
        long sum = check(chunks, 0, 2) + check(chunks, 0, 2);
        System.out.println("sum " + sum);
    }
}
