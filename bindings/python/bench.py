"""What a permit costs from Python, and the share of it the client's lock
takes, measured in one process (README.md quotes its output):

    python3 bindings/python/bench.py

A standalone client (no segment of its name), so no daemon is needed. Each
figure is the best of three runs of N calls; the lock's share is two
enter/exit pairs of the client's own lock (the acquire's call and the
release's each hold it once), timed the same way.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bulkhead  # noqa: E402

N = 300_000


def best_of_three(body):
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        body()
        best = min(best, (time.perf_counter() - start) / N * 1e6)
    return best


def main():
    client = bulkhead.Client(segment=f"bulkhead-bench-none-{os.getpid()}")
    dep = client.dependency("bench")
    lock = client._lock

    def permits():
        for _ in range(N):
            with dep.acquire():
                pass

    def locks():
        for _ in range(N):
            with lock:
                pass
            with lock:
                pass

    per_call, per_locks = best_of_three(permits), best_of_three(locks)
    print(f"with dep.acquire(): pass   {per_call:.2f} us")
    print(f"two lock enter/exit pairs  {per_locks:.2f} us ({per_locks / per_call:.0%} of it)")
    client.close()


if __name__ == "__main__":
    main()
