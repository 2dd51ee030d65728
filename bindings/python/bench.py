"""What a permit costs from Python, and the share of it the client's lock
takes, measured in one process (README.md quotes its output):

    python3 bindings/python/bench.py

A standalone client (no segment of its name), so no daemon is needed. Each
figure is the best of three runs of N calls; the lock's share is two
enter/exit pairs of the client's own lock (the acquire's call and the
release's each hold it once), timed the same way. Then an acquire that
may wait (a timeout), admitted at once, on another thread and on the main
thread, which hands its call to the waiter thread (so that a signal
handler may run while it waits): N / 10 calls, as those are slower.
"""

import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bulkhead  # noqa: E402

N = 300_000


def best_of_three(body, n=N):
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        body(n)
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def on_another_thread(fn, *args):
    result = []
    thread = threading.Thread(target=lambda: result.append(fn(*args)))
    thread.start()
    thread.join()
    return result[0]


def main():
    client = bulkhead.Client(segment=f"bulkhead-bench-none-{os.getpid()}")
    dep = client.dependency("bench")
    lock = client._lock

    def permits(n):
        for _ in range(n):
            with dep.acquire():
                pass

    def locks(n):
        for _ in range(n):
            with lock:
                pass
            with lock:
                pass

    def waiting_permits(n):
        for _ in range(n):
            with dep.acquire(timeout=5):
                pass

    per_call, per_locks = best_of_three(permits), best_of_three(locks)
    per_wait_thread = on_another_thread(best_of_three, waiting_permits, N // 10)
    per_wait_main = best_of_three(waiting_permits, N // 10)
    print(f"with dep.acquire(): pass                 {per_call:.2f} us")
    print(f"two lock enter/exit pairs                {per_locks:.2f} us ({per_locks / per_call:.0%} of it)")
    print(f"with dep.acquire(timeout=5): pass        {per_wait_thread:.2f} us on another thread")
    print(f"                                         {per_wait_main:.2f} us on the main thread")
    client.close()


if __name__ == "__main__":
    main()
