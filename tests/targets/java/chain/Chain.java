// A known workload for the agent's Java tests (tests/e2e/agent_java.rs): nearly all time in
// Chain.main → Chain.outerLoop → Chain$Worker.middleStep → Chain$Worker.innerHot, the
// names of the other runtimes' chains adapted to Java. Compiled with javac and run as
// `java -cp DIR chain.Chain [SECONDS]` (default: an hour).
package chain;

public class Chain {
    static final class Worker {
        long innerHot(long x) {
            for (int i = 0; i < 20_000; i++) {
                x = x * 6364136223846793005L + 1442695040888963407L;
            }
            return x;
        }

        long middleStep(long x) {
            return innerHot(x) ^ (x >>> 7);
        }
    }

    static long outerLoop(Worker worker, double seconds) {
        long end = System.nanoTime() + (long) (seconds * 1e9);
        long x = 1;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 100; i++) {
                x = worker.middleStep(x);
            }
        }
        return x;
    }

    public static void main(String[] args) {
        double seconds = args.length > 0 ? Double.parseDouble(args[0]) : 3600;
        System.out.println(outerLoop(new Worker(), seconds));
    }
}
