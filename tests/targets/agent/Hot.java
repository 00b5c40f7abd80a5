// A known workload for the agent on the JVM (pkg/agent/benches/overhead.sh, LOAD=mix): nearly
// all time in Hot.main → Hot.work → Hot.inner. Run as a single source file:
// java Hot.java [SECONDS] (default: an hour).
public class Hot {
    static long inner(long x) {
        for (int i = 0; i < 100_000; i++) {
            x = x * 6364136223846793005L + 1442695040888963407L;
        }
        return x;
    }

    static long work(double seconds) {
        long end = System.nanoTime() + (long) (seconds * 1e9);
        long x = 1;
        while (System.nanoTime() < end) {
            x = inner(x);
        }
        return x;
    }

    public static void main(String[] args) {
        System.out.println(work(args.length > 0 ? Double.parseDouble(args[0]) : 3600));
    }
}
