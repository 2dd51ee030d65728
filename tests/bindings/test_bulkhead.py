"""The Python binding over a real libbulkhead, in standalone mode (no daemon):
permits as context managers, outcomes, rejections and errors. Run by ctest
(python_bindings) with the system python3 and $BULKHEAD_LIBRARY set to the
built library."""

import asyncio
import concurrent.futures
import contextlib
import copy
import ctypes
import gc
import os
import pickle
import signal
import socket
import tempfile
import threading
import time
import unittest

import bulkhead

ABSENT = f"bhtest-py-absent-{os.getpid()}"  # no such segment: standalone
# A libbulkhead built with ThreadSanitizer, its runtime preloaded
# (tests/CMakeLists.txt): a forked child of a threaded process that starts
# a thread is ended by it (its die_after_fork).
UNDER_TSAN = "libtsan" in os.environ.get("LD_PRELOAD", "")


class BlockingCall:
    """A stand-in for bh_acquire_cancellable() waiting in a queue (which
    standalone mode has not): one call that blocks in C, on a mutex a
    thread of its own holds, as the real one blocks in a futex wait, so
    that no Python signal handler runs on the thread that makes it until
    it returns. The holder lets it return once `cancel` is requested
    (ended: "cancelled"), once until() is true ("until"), or after a
    give-up that turns a hang into a failure ("gave up"); it then returns
    result(), 0 (admitted) unless given."""

    _libc = ctypes.CDLL(None)

    def __init__(self, cancel, until=lambda: False, result=lambda: 0):
        self._cancel, self._until, self._result = cancel, until, result
        self._mutex = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER (glibc)
        self.ended = None
        self.in_call = threading.Event()
        held = threading.Event()
        threading.Thread(target=self._hold, args=(held,), daemon=True).start()
        held.wait()

    def _hold(self, held):
        self._libc.pthread_mutex_lock(self._mutex)
        held.set()
        give_up = time.monotonic() + 30
        while self.ended is None:
            if bulkhead._c().bh_cancel_requested(ctypes.byref(self._cancel)):
                self.ended = "cancelled"
            elif self._until():
                self.ended = "until"
            elif time.monotonic() > give_up:
                self.ended = "gave up"
            else:
                time.sleep(0.005)
        self._libc.pthread_mutex_unlock(self._mutex)

    def __call__(self):
        self.in_call.set()
        self._libc.pthread_mutex_lock(self._mutex)
        self._libc.pthread_mutex_unlock(self._mutex)
        return self._result()


@contextlib.contextmanager
def signal_handled(signum, handler):
    """`handler` set for `signum` within the block."""
    previous = signal.signal(signum, handler)
    try:
        yield
    finally:
        signal.signal(signum, previous)


def signal_main_thread_in(call, signum):
    """Sends `signum` to the main thread once `call` has begun."""
    def send():
        call.in_call.wait()
        signal.pthread_kill(threading.main_thread().ident, signum)

    threading.Thread(target=send, daemon=True).start()


class StandaloneTest(unittest.TestCase):
    def setUp(self):
        self.client = bulkhead.Client(segment=ABSENT, static_limit=2)
        self.dep = self.client.dependency("payments")

    def tearDown(self):
        self.client.close()

    def test_loads_the_library_it_was_told_to(self):
        self.assertEqual(bulkhead.library_path(), os.environ["BULKHEAD_LIBRARY"])

    def test_opens_standalone_without_a_segment(self):
        self.assertTrue(self.client.standalone)
        self.assertIn("standalone", self.client.status)
        self.assertEqual(self.dep.limit, 2)

    def test_context_manager_releases_on_exit(self):
        with self.dep.acquire() as permit:
            self.assertTrue(permit)
            self.assertEqual(self.dep.inflight, 1)
        self.assertFalse(permit)
        self.assertEqual(self.dep.inflight, 0)

    def test_context_manager_releases_when_the_call_raises(self):
        with self.assertRaises(KeyError):
            with self.dep.acquire():
                raise KeyError("the call failed")
        self.assertEqual(self.dep.inflight, 0)

    def test_a_with_block_ended_by_an_exception_counts_as_the_call_ended(self):
        # As C++ execute(): the circuit breaker and the limit policy learn of
        # failures and timeouts from the exceptions calls raise; an exception
        # that says nothing of this dependency is no sample.
        lib, outcomes = bulkhead._c(), []
        real_release = lib.bh_release
        lib.bh_release = lambda permit, outcome: (outcomes.append(outcome), real_release(permit, outcome))
        # The timeouts of socket, asyncio and concurrent.futures are
        # TimeoutError only from Python 3.10 and 3.11 on.
        cases = [(None, bulkhead.SUCCESS), (TimeoutError, bulkhead.DROPPED), (socket.timeout, bulkhead.DROPPED),
                 (asyncio.TimeoutError, bulkhead.DROPPED), (concurrent.futures.TimeoutError, bulkhead.DROPPED),
                 (ConnectionError, bulkhead.FAILED), (KeyError, bulkhead.FAILED),
                 (lambda: bulkhead.Rejected("other", bulkhead.REJECT_LIMIT), bulkhead.IGNORE),
                 (KeyboardInterrupt, bulkhead.IGNORE), (SystemExit, bulkhead.IGNORE)]
        try:
            for raised, _ in cases:
                try:
                    with self.dep.acquire():
                        if raised is not None:
                            raise raised()
                except BaseException:
                    pass
            with self.dep.acquire() as permit:  # an outcome said inside the block wins
                permit.ignore()
            with self.assertRaises(KeyError):
                with self.dep.acquire() as permit:
                    permit.success()
                    raise KeyError("after the call")
        finally:
            lib.bh_release = real_release
        self.assertEqual(outcomes, [outcome for _, outcome in cases] + [bulkhead.IGNORE, bulkhead.SUCCESS])
        self.assertEqual(self.dep.inflight, 0)

    def test_remaining_is_the_budget_left_for_the_call(self):
        with self.dep.acquire(timeout=30) as permit:
            left = permit.remaining()
            self.assertGreater(left, 0)
            self.assertLessEqual(left, 30)
        self.assertEqual(permit.remaining(), 0.0)  # released: empty
        with self.dep.acquire() as permit:
            self.assertIsNone(permit.remaining())  # no deadline

    def test_a_library_that_cannot_be_loaded_says_what_to_do(self):
        saved_lib, saved_env = bulkhead._lib, os.environ["BULKHEAD_LIBRARY"]
        bulkhead._lib, os.environ["BULKHEAD_LIBRARY"] = None, "/nonexistent/libbulkhead.so"
        try:
            with self.assertRaises(OSError) as caught:
                bulkhead.Client(segment=ABSENT)
        finally:
            bulkhead._lib, os.environ["BULKHEAD_LIBRARY"] = saved_lib, saved_env
        # The loader's reason, naming the path, first: no "[Errno None] ".
        self.assertTrue(str(caught.exception).startswith("cannot load libbulkhead (/nonexistent/libbulkhead.so: "),
                        str(caught.exception))
        self.assertIn("BULKHEAD_LIBRARY", str(caught.exception))

    def test_rejects_at_the_limit(self):
        with self.dep.acquire(), self.dep.acquire():
            with self.assertRaises(bulkhead.Rejected) as caught:
                self.dep.acquire()
            self.assertEqual(caught.exception.reason, 1)
            self.assertEqual(caught.exception.dependency, "payments")
            self.assertEqual(str(caught.exception), "payments: not admitted (REJECT_LIMIT, at its limit)")
            self.assertIsNone(self.dep.try_acquire())
        self.assertEqual(self.dep.inflight, 0)
        permit = self.dep.try_acquire()
        self.assertTrue(permit)
        permit.dropped()
        permit.dropped()  # twice: harmless
        self.assertEqual(self.dep.inflight, 0)

    def test_release_with_a_measured_latency(self):
        permit = self.dep.try_acquire()
        permit.release(bulkhead.SUCCESS, latency_ns=1500)
        self.assertFalse(permit)
        self.assertEqual(self.dep.inflight, 0)

    def test_a_bad_outcome_is_a_value_error_and_gives_nothing_back(self):
        permit = self.dep.try_acquire()
        for bad in ("x", 7, -1, None, True, 1.0):
            with self.assertRaises(ValueError) as raised:
                permit.release(bad)
            self.assertIn("still held", str(raised.exception))
            self.assertTrue(permit)
            self.assertEqual(self.dep.inflight, 1)
        permit.release(bulkhead.FAILED)
        self.assertEqual(self.dep.inflight, 0)

    def test_a_latency_too_large_for_the_abi_is_given_as_its_largest(self):
        lib = bulkhead._c()
        given = []
        real = lib.bh_release_latency
        lib.bh_release_latency = lambda *args: given.append(args[2]) or real(*args)
        try:
            self.dep.try_acquire().release(bulkhead.SUCCESS, latency_ns=2**64 + 5)
            self.dep.try_acquire().release(bulkhead.SUCCESS, latency_ns=-3)
        finally:
            lib.bh_release_latency = real
        self.assertEqual(given, [2**64 - 1, 0])
        self.assertEqual(self.dep.inflight, 0)

    def test_a_failed_call_and_the_breaker_of_a_standalone_client(self):
        permit = self.dep.try_acquire()
        permit.failed()
        self.assertFalse(permit)
        self.assertEqual(self.dep.inflight, 0)
        self.assertEqual(self.dep.breaker_state(), bulkhead.BREAKER_CLOSED)  # standalone: no breaker
        self.assertEqual((bulkhead.FAILED, bulkhead.REJECT_OPEN_CIRCUIT), (3, 4))

    def test_a_forgotten_permit_is_given_back(self):
        self.dep.try_acquire()  # dropped on the floor
        self.assertEqual(self.dep.inflight, 0)

    def test_a_partition_standalone_is_the_dependency_itself(self):
        critical = self.dep.partition("critical")  # no daemon: no partitions known
        with critical.acquire():
            self.assertEqual(self.dep.inflight, 1)
        self.assertEqual(self.dep.inflight, 0)
        with self.assertRaises(ValueError):
            self.dep.partition("no good")

    def test_a_bad_name_is_a_value_error(self):
        with self.assertRaises(ValueError) as caught:
            self.client.dependency("bad name")
        self.assertIn("bad name", str(caught.exception))
        # Named once, by libbulkhead's reason, even when it is empty.
        with self.assertRaises(ValueError) as caught:
            self.client.dependency("")
        self.assertEqual(str(caught.exception), "dependency name '' is empty")

    def test_a_name_that_is_no_str_is_a_type_error_that_names_it(self):
        for make, message in ((lambda: self.client.dependency(b"payments"), "dependency name b'payments'"),
                              (lambda: self.client.dependency(None), "dependency name None"),
                              (lambda: self.dep.partition(b"batch"), "partition name b'batch'"),
                              (lambda: bulkhead.Client(segment=b"bulkhead"), "segment name b'bulkhead'")):
            with self.assertRaises(TypeError) as caught:
                make()
            self.assertIn(message, str(caught.exception))
            self.assertIn("must be a str", str(caught.exception))

    def test_an_empty_segment_name_is_named_as_given(self):
        # "" is a name the library refuses, not the default "bulkhead".
        with self.assertRaises(ValueError) as caught:
            bulkhead.Client(segment="")
        self.assertEqual(str(caught.exception), "segment name '' is empty")

    def test_require_segment_raises_file_not_found(self):
        with self.assertRaises(FileNotFoundError) as caught:
            bulkhead.Client(segment=ABSENT, require_segment=True)
        # Named once: libbulkhead's reason says which segment.
        self.assertTrue(caught.exception.strerror.startswith(f"segment /dev/shm/{ABSENT}: cannot open: "),
                        caught.exception.strerror)

    def test_closing_with_permits_out_closes_at_the_last_release(self):
        # Closed while permits are out, the client could never give them
        # back: they would stay taken host-wide, with its process slot,
        # until the process exits. They go back as they are released (the
        # with-block's, and one dropped unreleased), and then it closes.
        lib, calls = bulkhead._c(), []
        real_release, real_close = lib.bh_release, lib.bh_client_close
        lib.bh_release = lambda permit, outcome: (calls.append(("release", outcome)), real_release(permit, outcome))
        lib.bh_client_close = lambda handle: (calls.append(("close", handle.value)), real_close(handle))
        try:
            client = bulkhead.Client(segment=ABSENT)
            handle = client._handle.value
            dep = client.dependency("payments")
            forgotten = dep.try_acquire()
            with dep.acquire():
                client.close()
                with self.assertRaises(ValueError):
                    dep.try_acquire()  # closing: no call starts
            self.assertEqual(calls, [("release", bulkhead.SUCCESS)])
            del forgotten
            self.assertEqual(calls, [("release", bulkhead.SUCCESS), ("release", bulkhead.IGNORE), ("close", handle)])
            self.assertIsNone(client._handle)
            client.close()  # closed: nothing
        finally:
            lib.bh_release, lib.bh_client_close = real_release, real_close
        self.assertEqual(len(calls), 3)

    def test_a_closed_client_is_refused_not_crashed(self):
        permit = self.dep.try_acquire()
        permit.release()
        self.client.close()
        self.client.close()  # twice: harmless
        with self.assertRaises(ValueError):
            self.dep.try_acquire()
        with self.assertRaises(ValueError):
            self.client.dependency("payments")


    def test_a_name_with_a_nul_is_a_value_error_not_cut_short(self):
        for make in (lambda: self.client.dependency("pay\0ments"), lambda: self.dep.partition("de\0fault"),
                     lambda: bulkhead.Client(segment=ABSENT + "\0x")):
            with self.assertRaises(ValueError) as caught:
                make()
            self.assertIn("NUL", str(caught.exception))
        self.assertEqual(len(self.client._dependencies), 1)  # "pay" was never claimed

    def test_what_holds_a_handle_refuses_pickling_and_copying_by_name(self):
        permit = self.dep.try_acquire()
        for obj, name in ((self.client, "Client"), (self.dep, "Dependency"), (permit, "Permit")):
            for attempt in (pickle.dumps, copy.copy, copy.deepcopy):
                with self.assertRaises(TypeError) as raised:
                    attempt(obj)
                self.assertIn(f"a bulkhead.{name} cannot be pickled or copied", str(raised.exception))
        permit.release()
        self.assertEqual(self.dep.inflight, 0)

    def test_rejected_survives_pickling_and_copying(self):
        rejected = bulkhead.Rejected("payments", bulkhead.REJECT_LIMIT)
        for again in (pickle.loads(pickle.dumps(rejected)), copy.copy(rejected)):
            self.assertEqual((again.dependency, again.reason, str(again)),
                             (rejected.dependency, rejected.reason, str(rejected)))

    def test_closing_from_many_threads_closes_once(self):
        # bh_client_close() twice is a double free: the process would abort.
        barrier = threading.Barrier(8)

        def close():
            barrier.wait()
            self.client.close()

        threads = [threading.Thread(target=close) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        with self.assertRaises(ValueError):
            self.dep.try_acquire()

    def test_closing_while_threads_use_the_client_refuses_them_after(self):
        # Each thread calls in until the client is closed; none may use
        # freed memory (a crash), each must end with ValueError.
        outcomes = []
        started = threading.Barrier(5)

        def use():
            started.wait()
            try:
                while True:
                    _ = self.dep.limit, self.dep.inflight, self.dep.breaker_state()
                    permit = self.dep.try_acquire()
                    if permit:
                        permit.release()
            except ValueError:
                outcomes.append("closed")

        threads = [threading.Thread(target=use) for _ in range(4)]
        for t in threads:
            t.start()
        started.wait()
        self.client.close()
        for t in threads:
            t.join()
        self.assertEqual(outcomes, ["closed"] * 4)

    def test_a_waiting_acquire_standalone_is_admitted_or_refused_at_once(self):
        # Standalone, no daemon gives the dependency a wait queue: at the
        # limit a waiting acquire is refused at once, as queue full.
        with self.dep.acquire(timeout=5), self.dep.acquire(timeout=0):
            with self.assertRaises(bulkhead.Rejected) as caught:
                self.dep.acquire(timeout=5)
            self.assertEqual(caught.exception.reason, bulkhead.REJECT_QUEUE_FULL)
            self.assertIsNone(self.dep.try_acquire(timeout=float("inf")))
        self.assertEqual(self.dep.inflight, 0)

    def test_acquire_async_is_admitted_or_refused_as_acquire(self):
        # Standalone: no wait queue, so a waiting acquire_async() answers at
        # once, on a thread of its own; timeout None on the loop itself.
        async def both():
            with await self.dep.acquire_async(timeout=5), await self.dep.acquire_async():
                self.assertEqual(self.dep.inflight, 2)
                with self.assertRaises(bulkhead.Rejected) as caught:
                    await self.dep.acquire_async(timeout=5)
                self.assertEqual(caught.exception.reason, bulkhead.REJECT_QUEUE_FULL)
                with self.assertRaises(bulkhead.Rejected) as caught:
                    await self.dep.acquire_async()
                self.assertEqual(caught.exception.reason, bulkhead.REJECT_LIMIT)

        asyncio.run(both())
        self.assertEqual(self.dep.inflight, 0)

    def test_a_timeout_too_long_for_the_clock_is_the_latest_deadline(self):
        # A finite timeout past 2^64 ns from now: the latest deadline there
        # is, not an OverflowError from the float or int arithmetic.
        for timeout in (1e300, 1.7e308, 10**400, 2**64):
            with self.dep.acquire(timeout=timeout) as permit:
                self.assertGreater(permit.remaining(), 5e8, repr(timeout))  # 2^64 ns is 584 years
        self.assertEqual(self.dep.inflight, 0)

    def test_a_bad_timeout_is_a_value_error(self):
        for timeout in (-1, float("nan"), "1", True):
            with self.assertRaises(ValueError, msg=repr(timeout)):
                self.dep.acquire(timeout=timeout)
        self.assertEqual(self.dep.inflight, 0)

    def test_a_waiting_call_holds_up_neither_other_calls_nor_close(self):
        # A call that blocks, as bh_acquire() does while it waits: the
        # others go on meanwhile, and close() waits for it to return.
        events, in_call, go_on = [], threading.Event(), threading.Event()

        def blocking():
            in_call.set()
            go_on.wait()
            events.append("call returned")

        waiter = threading.Thread(target=self.client._call_waiting, args=(blocking,))
        waiter.start()
        in_call.wait()
        other = threading.Thread(target=lambda: events.append(self.dep.limit))
        other.start()
        other.join(60)
        self.assertEqual(events, [2])  # not held up by the waiting call

        def close():
            self.client.close()
            events.append("closed")

        closer = threading.Thread(target=close)
        closer.start()
        while not self.client._closing:  # close() has begun: later calls are refused
            threading.Event().wait(0.001)
        with self.assertRaises(ValueError):
            self.dep.try_acquire(timeout=1)
        go_on.set()
        waiter.join()
        closer.join()
        self.assertEqual(events, [2, "call returned", "closed"])

    def test_a_child_forked_while_other_threads_use_the_client_can_use_and_close_it(self):
        # At the fork one thread holds the client's lock (a call into the
        # library) and another waits (counted for close()): neither is in
        # the child. Its calls must not wait for that lock, nor its close()
        # for that wait.
        holding, waiting, go_on = threading.Event(), threading.Event(), threading.Event()

        def hold_the_lock():
            with self.client._lock:
                holding.set()
                go_on.wait()

        def wait_in_a_call():
            waiting.set()
            go_on.wait()

        threads = [threading.Thread(target=self.client._call_waiting, args=(wait_in_a_call,)),
                   threading.Thread(target=hold_the_lock)]
        threads[0].start()
        waiting.wait()  # counted, and the lock let go
        threads[1].start()
        holding.wait()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # a hang fails the test, not the suite's timeout
            code = 1
            try:
                if self.dep.limit == 2 and self.dep.try_acquire():
                    self.client.close()
                    code = 0
            finally:
                os._exit(code)
        go_on.set()
        for t in threads:
            t.join()
        _, status = os.waitpid(pid, 0)
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status)

    def test_a_child_closes_a_client_at_once_whatever_permits_the_parent_held(self):
        # Permits held at the fork are the parent's (their release in the
        # child gives nothing back): the child's close() waits for none.
        permit = self.dep.try_acquire()
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)
            code = 1
            try:
                self.client.close()
                code = 0 if self.client._handle is None else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        permit.release()
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status)

    def test_closing_lets_permits_go_and_a_waiter_admitted_meanwhile_gives_its_back(self):
        # While close() waits for a waiting acquire, a release (what the
        # waiter may be waiting for) still goes through; a waiter admitted
        # then gives its permit back and raises ValueError, so that close()
        # ends with nothing held.
        held = self.dep.acquire()
        outcome, undone, in_call, go_on = [], [], threading.Event(), threading.Event()

        def admitted_late():
            in_call.set()
            go_on.wait()
            return 0  # admitted, as bh_acquire() would after the release

        def wait():
            try:
                self.client._call_waiting(admitted_late, undo=lambda: undone.append(True))
                outcome.append("returned")
            except ValueError:
                outcome.append("ValueError")

        waiter, closer = self._close_while_in_a_call(wait, in_call)
        with self.assertRaises(ValueError):
            self.dep.try_acquire()
        held.release()
        self.assertFalse(held)
        self.assertEqual(bulkhead._c().bh_inflight(self.dep._handle), 0)  # valid until close() ends
        go_on.set()
        waiter.join()
        closer.join()
        self.assertEqual(outcome, ["ValueError"])
        self.assertEqual(undone, [True])
        self.assertIsNone(self.client._handle)

    def _close_while_in_a_call(self, wait, in_call):
        """Runs `wait` on a thread and, once its call set `in_call`,
        self.client.close() on another; returns both threads once close()
        has begun."""
        waiter = threading.Thread(target=wait)
        waiter.start()
        in_call.wait()
        closer = threading.Thread(target=self.client.close)
        closer.start()
        while not self.client._closing:
            threading.Event().wait(0.001)
        return waiter, closer

    def test_a_waiter_interrupted_as_it_is_admitted_gives_its_permit_back_to_a_closing_client(self):
        # A Ctrl-C (or any signal handler's exception) that comes while
        # bh_acquire() waits is raised as the call returns, admitted or not.
        # If close() waits for that call meanwhile, a permit the call was
        # given must go back before the client closes, or it stays taken
        # host-wide (and the process slot with it) until the process exits.
        outcome, undone, in_call, go_on = [], [], threading.Event(), threading.Event()

        def admitted_then_interrupted():
            in_call.set()
            go_on.wait()
            raise KeyboardInterrupt  # as Python raises it once bh_acquire() returned a permit

        def wait():
            try:
                self.client._call_waiting(admitted_then_interrupted, undo=lambda: undone.append(True))
            except KeyboardInterrupt:
                outcome.append("KeyboardInterrupt")

        waiter, closer = self._close_while_in_a_call(wait, in_call)
        go_on.set()
        waiter.join()
        closer.join()
        self.assertEqual(outcome, ["KeyboardInterrupt"])
        self.assertEqual(undone, [True])
        self.assertIsNone(self.client._handle)

    def test_closing_on_a_thread_in_a_waiting_call_does_not_wait_for_itself(self):
        # A signal handler runs on the main thread as a wait there returns:
        # one that closes the client (on SIGTERM, say) must not wait for
        # that very call to end, which it never would. The call gives back
        # the permit it was given, and the client closes as it ends.
        client = bulkhead.Client(segment=ABSENT)  # not self.client: a hang here must not hang tearDown
        outcome, undone = [], []

        def admitted_and_closed_by_a_handler():
            client.close()  # as a signal handler would, on this thread, as the wait returns
            outcome.append("close() returned")
            return 0

        def wait():
            try:
                client._call_waiting(admitted_and_closed_by_a_handler, undo=lambda: undone.append(True))
            except ValueError:
                outcome.append("ValueError")

        waiter = threading.Thread(target=wait, daemon=True)
        waiter.start()
        waiter.join(30)  # a give-up: on failure, close() waits forever
        self.assertFalse(waiter.is_alive(), "close() waits for the call of the thread it runs on")
        self.assertEqual(outcome, ["close() returned", "ValueError"])
        self.assertEqual(undone, [True])
        self.assertIsNone(client._handle)

    def test_a_signal_handler_that_raises_during_a_main_thread_wait_cancels_it(self):
        # The wait is one call into libbulkhead: Python runs a handler only
        # once it returns, so a Ctrl-C would wait for the permit, or for the
        # timeout (math.inf: forever). Made on another thread, the main
        # thread waiting for it on a lock, the handler runs at once, and its
        # exception cancels the wait and propagates.
        def exit_on_sigterm(signum, frame):
            raise SystemExit(1)

        for signum, handler, raised in ((signal.SIGINT, signal.default_int_handler, KeyboardInterrupt),
                                        (signal.SIGTERM, exit_on_sigterm, SystemExit)):
            with self.subTest(signal=signum.name):
                cancel = bulkhead._Cancel()
                call = BlockingCall(cancel, result=lambda: bulkhead._REJECT_CANCELLED)
                signal_main_thread_in(call, signum)
                with signal_handled(signum, handler), self.assertRaises(raised):
                    self.client._call_waiting(call, cancel=cancel)
                self.assertEqual(call.ended, "cancelled")
                self.assertEqual(self.client._waiting, {})

    def test_a_permit_admitted_as_a_signal_handler_raises_is_given_back(self):
        # The cancel may come as the wait is admitted: the permit goes back
        # as ignored, the exception propagating all the same.
        cancel, permit = bulkhead._Cancel(), bulkhead._Permit()
        lib = bulkhead._c()
        call = BlockingCall(cancel, result=lambda: lib.bh_try_acquire(self.dep._handle, ctypes.byref(permit)))
        signal_main_thread_in(call, signal.SIGINT)
        with signal_handled(signal.SIGINT, signal.default_int_handler), self.assertRaises(KeyboardInterrupt):
            self.client._call_waiting(call, cancel=cancel,
                                      undo=lambda: lib.bh_release(ctypes.byref(permit), bulkhead.IGNORE))
        self.assertIsNone(permit.dep)
        self.assertEqual(self.dep.inflight, 0)
        self.assertEqual(self.client._held, 0)
        self.assertEqual(call.ended, "cancelled")

    def test_a_signal_handler_that_returns_during_a_main_thread_wait_lets_it_go_on(self):
        # Its place in the queue kept: not cancelled, admitted later.
        ran = []
        cancel = bulkhead._Cancel()
        call = BlockingCall(cancel, until=lambda: bool(ran))
        signal_main_thread_in(call, signal.SIGUSR1)
        with signal_handled(signal.SIGUSR1, lambda signum, frame: ran.append(call.ended)):
            rc = self.client._call_waiting(call, cancel=cancel)
        self.assertEqual(ran, [None])  # while the call waited
        self.assertEqual(call.ended, "until")
        self.assertEqual(rc, 0)

    def test_a_signal_handler_may_wait_for_a_permit_while_the_main_thread_waits(self):
        # The handler's own waiting acquire cannot be made on the thread
        # the interrupted wait is made on: it must not wait for it.
        admitted = []
        cancel = bulkhead._Cancel()
        call = BlockingCall(cancel, until=lambda: bool(admitted))

        def handler(signum, frame):
            with self.dep.acquire(timeout=30):
                admitted.append(call.ended)

        signal_main_thread_in(call, signal.SIGUSR1)
        with signal_handled(signal.SIGUSR1, handler):
            self.client._call_waiting(call, cancel=cancel)
        self.assertEqual(admitted, [None])
        self.assertEqual(call.ended, "until")
        self.assertEqual(self.dep.inflight, 0)

    def test_a_signal_handler_closes_the_client_the_main_thread_waits_in(self):
        # Run during the wait, its close() returns at once (waiting for that
        # call would wait forever) and cancels the wait; the call gives back
        # a permit admitted in that instant, raises ValueError, and the
        # client closes as it ends, nothing held.
        client = bulkhead.Client(segment=ABSENT)  # not self.client: a hang here must not hang tearDown
        dep, lib = client.dependency("payments"), bulkhead._c()
        cancel, permit, events = bulkhead._Cancel(), bulkhead._Permit(), []
        call = BlockingCall(cancel, result=lambda: lib.bh_try_acquire(dep._handle, ctypes.byref(permit)))

        def handler(signum, frame):
            client.close()
            events.append("close() returned")

        def hung(signum, frame):
            raise AssertionError("hung")

        signal_main_thread_in(call, signal.SIGTERM)
        signal.alarm(60)  # close() waiting for its own thread's call would wait forever
        try:
            with signal_handled(signal.SIGALRM, hung), signal_handled(signal.SIGTERM, handler):
                with self.assertRaises(ValueError):
                    client._call_waiting(call, cancel=cancel,
                                         undo=lambda: lib.bh_release(ctypes.byref(permit), bulkhead.IGNORE))
        finally:
            signal.alarm(0)
        self.assertEqual(events, ["close() returned"])
        self.assertEqual(call.ended, "cancelled")
        self.assertIsNone(permit.dep)
        self.assertEqual(client._held, 0)
        self.assertIsNone(client._handle)

    def test_a_main_thread_wait_when_no_thread_can_start_is_made_directly(self):
        # At interpreter shutdown (an atexit handler) Python 3.12 starts no
        # thread: the first main-thread wait then is the call itself, as it
        # was before the waiter thread, not a RuntimeError.
        cancel = bulkhead._Cancel()
        call = BlockingCall(cancel, until=lambda: True)
        waiter, start = bulkhead._waiter, threading.Thread.start

        def refuse(thread):
            raise RuntimeError("can't create new thread at interpreter shutdown")

        bulkhead._waiter, threading.Thread.start = None, refuse
        try:
            self.assertEqual(self.client._call_waiting(call, cancel=cancel), 0)
        finally:
            bulkhead._waiter, threading.Thread.start = waiter, start
        self.assertEqual(call.ended, "until")
        self.assertEqual(self.client._waiting, {})

    def test_a_forked_child_interrupts_its_main_thread_waits_too(self):
        # The thread the parent's main-thread waits are made on is not in
        # the child: the child's must not be handed to it.
        if UNDER_TSAN:
            self.skipTest("ThreadSanitizer ends a forked child that starts a thread; the plain and "
                          "AddressSanitizer runs make this test")
        cancel = bulkhead._Cancel()
        self.client._call_waiting(BlockingCall(cancel, until=lambda: True), cancel=cancel)
        pid = os.fork()
        if pid == 0:
            signal.alarm(20)  # a hang fails the test, not the suite's timeout
            code = 1
            try:
                cancel = bulkhead._Cancel()
                call = BlockingCall(cancel, result=lambda: bulkhead._REJECT_CANCELLED)
                signal_main_thread_in(call, signal.SIGINT)
                with signal_handled(signal.SIGINT, signal.default_int_handler):
                    self.client._call_waiting(call, cancel=cancel)
            except KeyboardInterrupt:
                code = 0 if call.ended == "cancelled" else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        self.assertTrue(os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status)

    def test_a_client_dropped_unclosed_is_closed_when_collected(self):
        # In shared mode an open client holds one of the host's process
        # slots: clients dropped without close() must not fill the table.
        lib, closed = bulkhead._c(), []
        real_close = lib.bh_client_close
        lib.bh_client_close = lambda handle: (closed.append(handle.value), real_close(handle))
        try:
            dropped = bulkhead.Client(segment=ABSENT)
            handle = dropped._handle.value
            dropped.dependency("payments")  # a cycle: client, its cache, the dependency
            with dropped.dependency("payments").acquire():
                pass
            del dropped
            gc.collect()
        finally:
            lib.bh_client_close = real_close
        self.assertEqual(closed, [handle])

    def test_a_permit_collected_with_its_client_is_given_back_before_it_closes(self):
        # The client is in a cycle with its dependencies, so the collector
        # finalizes it, and a permit that became garbage with it, in one
        # pass and in no promised order. Closed first, it would keep the
        # permit taken host-wide (and its process slot) until the process
        # exits, its limit reached for every process if that was the last.
        lib, calls = bulkhead._c(), []
        real_release, real_close = lib.bh_release, lib.bh_client_close
        lib.bh_release = lambda permit, outcome: (calls.append(("release", outcome)), real_release(permit, outcome))
        lib.bh_client_close = lambda handle: (calls.append(("close", handle.value)), real_close(handle))

        class Service:
            def __init__(self):
                self.client = bulkhead.Client(segment=ABSENT)
                self.permits = [self.client.dependency("payments").try_acquire() for _ in range(2)]
                self.itself = self  # a cycle: garbage only the collector finds

        try:
            service = Service()
            handle = service.client._handle.value
            del service
            gc.collect()
        finally:
            lib.bh_release, lib.bh_client_close = real_release, real_close
        self.assertEqual(calls, [("release", bulkhead.IGNORE)] * 2 + [("close", handle)])

    def test_a_module_installed_under_a_prefix_loads_the_library_installed_with_it(self):
        # cmake --install --prefix PREFIX: the module in PREFIX/lib/python3/
        # dist-packages/bulkhead/, libbulkhead.so.0 in PREFIX/lib/, which
        # the dynamic loader does not search.
        saved_file, saved_env = bulkhead.__file__, os.environ.pop("BULKHEAD_LIBRARY")
        try:
            with tempfile.TemporaryDirectory() as prefix:
                lib = os.path.join(os.path.realpath(prefix), "lib")
                module = os.path.join(lib, "python3", "dist-packages", "bulkhead")
                os.makedirs(module)
                os.symlink(saved_env, os.path.join(lib, "libbulkhead.so.0"))
                bulkhead.__file__ = os.path.join(module, "__init__.py")
                self.assertEqual(bulkhead.library_path(), os.path.join(lib, "libbulkhead.so.0"))
                os.remove(os.path.join(lib, "libbulkhead.so.0"))  # none there: the system's
                self.assertEqual(bulkhead.library_path(), "libbulkhead.so.0")
        finally:
            bulkhead.__file__ = saved_file
            os.environ["BULKHEAD_LIBRARY"] = saved_env

    def test_a_copy_of_the_module_high_in_the_tree_falls_back_to_the_system(self):
        # Vendored as /bulkhead/__init__.py: no checkout three levels up. The
        # system's is the soname of this ABI, even with a libbulkhead.so.1
        # (and its libbulkhead.so) on the loader's path.
        saved_file, saved_env = bulkhead.__file__, os.environ.pop("BULKHEAD_LIBRARY")
        saved_path = os.environ.get("LD_LIBRARY_PATH")
        other_abi = os.environ.get("BULKHEAD_TEST_OTHER_ABI")
        try:
            bulkhead.__file__ = "/bulkhead/__init__.py"
            if other_abi:  # not in deb_package's run
                os.environ["LD_LIBRARY_PATH"] = os.path.dirname(other_abi)
            self.assertEqual(bulkhead.library_path(), "libbulkhead.so.0")
        finally:
            bulkhead.__file__ = saved_file
            os.environ["BULKHEAD_LIBRARY"] = saved_env
            if saved_path is None:
                os.environ.pop("LD_LIBRARY_PATH", None)
            else:
                os.environ["LD_LIBRARY_PATH"] = saved_path

    @unittest.skipUnless(os.environ.get("BULKHEAD_TEST_OTHER_ABI"), "no library of another ABI to load")
    def test_a_library_of_another_abi_is_refused_not_used(self):
        # Functions of the same names, in another ABI's version node: called
        # as libbulkhead.so.0's, they would take arguments of another shape.
        other_abi = os.environ["BULKHEAD_TEST_OTHER_ABI"]
        saved_lib, saved_env = bulkhead._lib, os.environ["BULKHEAD_LIBRARY"]
        bulkhead._lib, os.environ["BULKHEAD_LIBRARY"] = None, other_abi
        try:
            with self.assertRaises(OSError) as caught:
                bulkhead.Client(segment=ABSENT)
        finally:
            bulkhead._lib, os.environ["BULKHEAD_LIBRARY"] = saved_lib, saved_env
        self.assertIn(f"{other_abi} is not libbulkhead of the ABI this module uses (libbulkhead.so.0",
                      str(caught.exception))


if __name__ == "__main__":
    unittest.main()
