"""A Python process that takes permits of one dependency through the binding,
for shared_limit_test (C++): it and a C++ process share one host-wide limit.

  hold_permits.py SEGMENT DEPENDENCY take-all
      takes permits until refused, prints "admitted N", gives them back
  hold_permits.py SEGMENT DEPENDENCY hold N UNTIL_FILE
      takes N permits (exit 3 if refused one), prints "holding N", waits for
      UNTIL_FILE to exist (30 s at most: exit 4), gives them back, prints
      "released"
  hold_permits.py SEGMENT DEPENDENCY wait SECONDS
      takes one permit, waiting up to SECONDS in the wait queue; prints
      "admitted" and gives it back, or "refused REASON" (exit 3)
  hold_permits.py SEGMENT DEPENDENCY wait-on-a-thread SECONDS IN_QUEUE_FILE
      waits for a permit on another thread, up to SECONDS; once IN_QUEUE_FILE
      exists (the test sees that thread in the wait queue; 30 s at most:
      exit 4), prints "running while it waits", which this thread can only
      do if the waiting one let go of the GIL; then "admitted" (or "refused
      REASON", exit 3) when the other thread's wait ends
  hold_permits.py SEGMENT DEPENDENCY close-beside-a-waiter IN_QUEUE_FILE
      waits for a permit on another thread with no timeout; once
      IN_QUEUE_FILE exists (30 s at most: exit 4), closes the client on
      this thread; the wait prints "ValueError" when close() ended it, then
      this thread "closed"
  hold_permits.py SEGMENT DEPENDENCY async-wait
      takes one permit with acquire_async() and no timeout, printing
      "running while it waits" from another task meanwhile, then "admitted"
  hold_permits.py SEGMENT DEPENDENCY async-cancel IN_QUEUE_FILE DONE_FILE
      waits with acquire_async() and no timeout; once IN_QUEUE_FILE exists,
      cancels the task, prints "cancelled" when the cancellation reached it,
      and exits once DONE_FILE exists (each 30 s at most: exit 4)
  hold_permits.py SEGMENT DEPENDENCY async-beside-the-executor
      sets a default executor of 2 threads, starts 2 acquire_async() with
      no timeout, then runs a function on that executor: prints "the
      loop's executor ran" (or, after 30 s, "the loop's executor was taken
      by the waits"), then how many of the waits still wait, and cancels them
  hold_permits.py SEGMENT DEPENDENCY close-on-sigterm SECONDS
      waits for a permit up to SECONDS, with a SIGTERM handler that closes
      the client; prints "closed by the handler" when it ran, then
      "ValueError" when the wait, admitted as the client closed, gave its
      permit back
  hold_permits.py SEGMENT DEPENDENCY interrupt
      waits for a permit with no timeout on the main thread; prints
      "KeyboardInterrupt" when a SIGINT ended the wait
  hold_permits.py SEGMENT DEPENDENCY handler-during-wait
      waits for a permit with no timeout on the main thread, with a SIGUSR1
      handler that prints "handler ran" (and returns); then "admitted"
  hold_permits.py SEGMENT DEPENDENCY beside-a-stuck-claim NAME
      looks NAME up on one thread (its slot held by a claim that does not
      finish: bh_dependency() waits for it up to a second) while this one
      takes and gives back a permit of DEPENDENCY; prints "others went on"
      or "others waited" (for the look-up to end first)
"""

import asyncio
import concurrent.futures
import contextlib
import math
import os
import signal
import sys
import threading
import time

import bulkhead


async def appears(path):
    give_up = time.monotonic() + 30
    while not os.path.exists(path):
        if time.monotonic() > give_up:
            print(f"{path} never appeared", flush=True)
            return False
        await asyncio.sleep(0.01)
    return True


async def wait_async(dep, mode, *args):
    waiting = asyncio.ensure_future(dep.acquire_async(timeout=math.inf))
    if mode == "async-wait":
        await asyncio.sleep(0)  # the wait starts, on a thread
        print("running while it waits", flush=True)
        with await waiting:
            print("admitted", flush=True)
        return 0
    if not await appears(args[0]):
        return 4
    waiting.cancel()
    try:
        await waiting
    except asyncio.CancelledError:
        print("cancelled", flush=True)
    return 0 if await appears(args[1]) else 4


async def beside_the_executor(dep):
    loop = asyncio.get_running_loop()
    loop.set_default_executor(concurrent.futures.ThreadPoolExecutor(max_workers=2))
    waits = [asyncio.ensure_future(dep.acquire_async(timeout=math.inf)) for _ in range(2)]
    await asyncio.sleep(0)  # the waits start
    try:
        print(await asyncio.wait_for(loop.run_in_executor(None, lambda: "the loop's executor ran"), 30), flush=True)
    except asyncio.TimeoutError:
        print("the loop's executor was taken by the waits", flush=True)
    print(f"{sum(not w.done() for w in waits)} still waiting", flush=True)
    for w in waits:
        w.cancel()
    await asyncio.gather(*waits, return_exceptions=True)
    return 0


def main(segment, dependency, mode, *args):
    client = bulkhead.Client(segment=segment, require_segment=True)
    dep = client.dependency(dependency)
    with contextlib.ExitStack() as held:
        if mode == "take-all":
            admitted = 0
            while admitted < 10000:
                try:
                    held.enter_context(dep.acquire())
                except bulkhead.Rejected:
                    break
                admitted += 1
            print(f"admitted {admitted}", flush=True)
            return 0
        if mode == "wait":
            try:
                held.enter_context(dep.acquire(timeout=float(args[0])))
            except bulkhead.Rejected as e:
                print(f"refused {e.reason}", flush=True)
                return 3
            print("admitted", flush=True)
            return 0
        if mode == "wait-on-a-thread":
            outcome = []

            def wait():
                try:
                    with dep.acquire(timeout=float(args[0])):
                        outcome.append("admitted")
                except bulkhead.Rejected as e:
                    outcome.append(f"refused {e.reason}")

            threading.Thread(target=wait, daemon=True).start()
            give_up = time.monotonic() + 30
            while not os.path.exists(args[1]):
                if time.monotonic() > give_up:
                    print(f"{args[1]} never appeared", flush=True)
                    return 4
                time.sleep(0.01)
            print("running while it waits", flush=True)
            while not outcome:
                time.sleep(0.01)
            print(outcome[0], flush=True)
            return 0 if outcome[0] == "admitted" else 3
        if mode == "close-beside-a-waiter":
            def wait_forever():
                try:
                    with dep.acquire(timeout=math.inf):
                        print("admitted", flush=True)
                except ValueError:
                    print("ValueError", flush=True)

            waiter = threading.Thread(target=wait_forever)
            waiter.start()
            give_up = time.monotonic() + 30
            while not os.path.exists(args[0]):
                if time.monotonic() > give_up:
                    print(f"{args[0]} never appeared", flush=True)
                    os._exit(4)  # the waiter would keep the process alive
                time.sleep(0.01)
            client.close()
            waiter.join()
            print("closed", flush=True)
            return 0
        if mode in ("async-wait", "async-cancel"):
            return asyncio.run(wait_async(dep, mode, *args))
        if mode == "async-beside-the-executor":
            return asyncio.run(beside_the_executor(dep))
        if mode == "close-on-sigterm":
            def on_sigterm(signum, frame):
                client.close()
                print("closed by the handler", flush=True)

            signal.signal(signal.SIGTERM, on_sigterm)
            print("handler set", flush=True)
            try:
                held.enter_context(dep.acquire(timeout=float(args[0])))
            except ValueError:
                print("ValueError", flush=True)
                return 0
            print("admitted", flush=True)
            return 3
        if mode == "interrupt":
            # Python's own handler, even if what started this process ignored SIGINT.
            signal.signal(signal.SIGINT, signal.default_int_handler)
            try:
                held.enter_context(dep.acquire(timeout=math.inf))
            except KeyboardInterrupt:
                print("KeyboardInterrupt", flush=True)
                return 0
            print("admitted", flush=True)
            return 3
        if mode == "handler-during-wait":
            signal.signal(signal.SIGUSR1, lambda signum, frame: print("handler ran", flush=True))
            held.enter_context(dep.acquire(timeout=math.inf))
            print("admitted", flush=True)
            return 0
        if mode == "beside-a-stuck-claim":
            looked_up = threading.Event()

            def look_up():
                try:
                    client.dependency(args[0])
                except OSError:
                    pass  # -EAGAIN: the claim never finished
                looked_up.set()

            other = threading.Thread(target=look_up)
            other.start()
            time.sleep(0.1)  # into bh_dependency(), which waits a second
            with dep.acquire():
                pass
            print("others waited" if looked_up.is_set() else "others went on", flush=True)
            other.join()
            return 0
        count, until = int(args[0]), args[1]
        for taken in range(count):
            try:
                held.enter_context(dep.acquire())
            except bulkhead.Rejected:
                print(f"refused after {taken} permits", flush=True)
                return 3
        print(f"holding {count}", flush=True)
        give_up = time.monotonic() + 30
        while not os.path.exists(until):
            if time.monotonic() > give_up:
                print(f"{until} never appeared", flush=True)
                return 4
            time.sleep(0.01)
    print("released", flush=True)
    client.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
