// C++ with exceptions and inlining for the agent's tests: work() throws and catches in a loop
// while most time goes to hot_leaf (inlined helpers included); every stack must reach main.
// Build: g++ -O2 -g (no frame pointers). Usage: agent-cpp-exceptions [SECONDS].
#include <chrono>
#include <cstdlib>
#include <stdexcept>

volatile unsigned long sink;

static inline unsigned long mix(unsigned long x)
{
	return x * 6364136223846793005UL + 1442695040888963407UL;
}

__attribute__((noinline)) unsigned long hot_leaf(unsigned long x)
{
	for (int i = 0; i < 200000; i++)
		x = mix(x);
	if ((x & 0xff) == 0)
		throw std::runtime_error("rare");
	return x;
}

__attribute__((noinline)) void work(double seconds)
{
	auto start = std::chrono::steady_clock::now();
	unsigned long x = 1;
	while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
		try {
			x = hot_leaf(x);
		} catch (const std::exception &) {
			x += 1;
		}
		if ((x & 0xf) == 0) {
			try {
				throw std::runtime_error("often");
			} catch (const std::exception &) {
				x ^= 0x55;
			}
		}
	}
	sink = x;
}

int main(int argc, char **argv)
{
	work(argc > 1 ? std::atof(argv[1]) : 3600);
	return 0;
}
