"""libbulkhead for Python: host-wide concurrency limits for outgoing calls.

A thin ctypes layer over libbulkhead's C ABI (bulkhead/bulkhead.h): no
compiled extension. A process opens a Client once, looks up a Dependency per
downstream once, and brackets each call with a permit::

    import bulkhead

    client = bulkhead.Client()                 # $BULKHEAD_SEGMENT, else "bulkhead"
    payments = client.dependency("payments")   # once, not per call

    try:
        with payments.acquire():               # raises bulkhead.Rejected at the limit
            call_payments()                    # returns: a success; raises: failed
    except bulkhead.Rejected:
        serve_fallback()

A permit the block leaves normally is released as a success; one left by an
exception as failed, or dropped for a TimeoutError (as C++ execute() counts a
call that threw), or ignored for Rejected and what is no Exception
(KeyboardInterrupt: no verdict on the dependency). ``permit.dropped()``
inside the block reports a timeout or back-pressure itself. With no segment (no daemon
has run since boot), the client opens in standalone mode and admits up to its
own static limit.

The library is found through $BULKHEAD_LIBRARY (a path to libbulkhead.so),
then the build tree of the checkout this file lies in (build/client/), then
the one installed with this file (PREFIX/lib/ for PREFIX/lib/python3/
dist-packages/bulkhead/), then the system's (libbulkhead.so.0, through the
dynamic loader); one of another ABI is refused (OSError).

``payments.acquire(timeout=0.2)`` waits up to 0.2 s for a permit in the
dependency's wait queue, when bulkheadd gives it one (max_queue).

Thread safety: a Client and its Dependency objects may be shared by threads;
a Permit may be released by a thread other than the one that acquired it
(once: a second release does nothing). Each call into libbulkhead
holds the client's lock, but for a waiting acquire and a look-up of a new
dependency (which waits up to a second for another process's unfinished
claim of the name), which other threads' calls do not wait for; close()
waits for every call other threads are in, those included (a waiting
acquire is cancelled, and raises ValueError), and those that come after it
raise ValueError.
"""

import ctypes
import errno
import os
import math
import pathlib
import signal
import sys
import threading
import time
import weakref

__all__ = ["Client", "Dependency", "Permit", "Rejected", "SUCCESS", "DROPPED", "IGNORE", "FAILED",
           "REJECT_LIMIT", "REJECT_QUEUE_FULL", "REJECT_DEADLINE", "REJECT_OPEN_CIRCUIT", "REJECT_PARTITION",
           "BREAKER_CLOSED", "BREAKER_OPEN", "BREAKER_HALF_OPEN", "library_path"]

# Outcomes (BH_SUCCESS, BH_DROPPED, BH_IGNORE, BH_FAILED). FAILED: the
# dependency answered an error; the circuit breaker counts it (as DROPPED).
SUCCESS, DROPPED, IGNORE, FAILED = 0, 1, 2, 3
# Rejection reasons (BH_REJECT_*), in Rejected.reason.
REJECT_LIMIT, REJECT_QUEUE_FULL, REJECT_DEADLINE, REJECT_OPEN_CIRCUIT, REJECT_PARTITION = 1, 2, 3, 4, 5
# BH_REJECT_CANCELLED: a wait close() cancelled, raised as ValueError.
_REJECT_CANCELLED = 6
# Circuit-breaker states (BH_BREAKER_*), from Dependency.breaker_state().
BREAKER_CLOSED, BREAKER_OPEN, BREAKER_HALF_OPEN = 0, 1, 2
# Client modes (BH_MODE_*).
MODE_SHARED, MODE_STANDALONE = 0, 1
_OPEN_REQUIRE_SEGMENT = 1
_SONAME = "libbulkhead.so.0"


class Rejected(Exception):
    """The call was not admitted.

    ``reason`` is the BH_REJECT_* code: REJECT_LIMIT (at its limit),
    REJECT_OPEN_CIRCUIT (its circuit breaker is open) or REJECT_PARTITION
    (a partition's call: its share reserved by others, or its hard cap); for
    a waiting acquire, REJECT_QUEUE_FULL (no wait queue, or max_queue calls
    wait already) or REJECT_DEADLINE (the timeout passed, or the expected
    wait exceeds it) in place of REJECT_LIMIT."""

    _WHY = {1: "REJECT_LIMIT, at its limit", 2: "REJECT_QUEUE_FULL, its wait queue is full or it has none",
            3: "REJECT_DEADLINE, the timeout passed or the expected wait exceeds it",
            4: "REJECT_OPEN_CIRCUIT, its circuit breaker is open",
            5: "REJECT_PARTITION, the partition's share is reserved by others or at its hard cap",
            6: "REJECT_CANCELLED, its wait was cancelled"}

    def __init__(self, dependency, reason):
        super().__init__(f"{dependency}: not admitted ({self._WHY.get(reason, f'reason {reason}')})")
        self.dependency = dependency
        self.reason = reason

    def __reduce__(self):
        # Pickled (a process pool's worker raising it) and copied with both.
        return (type(self), (self.dependency, self.reason))


class _Options(ctypes.Structure):
    _fields_ = [("segment", ctypes.c_char_p), ("static_limit", ctypes.c_long), ("flags", ctypes.c_uint)]


class _Permit(ctypes.Structure):
    # bh_permit is a caller-owned value whose fields are private, and it may
    # grow in a later version of the header; this buffer is larger than any
    # so far (16 or 24 bytes). Only the first field is read: NULL when the
    # permit holds nothing.
    _fields_ = [("dep", ctypes.c_void_p), ("_private", ctypes.c_uint64 * 7)]


class _Cancel(ctypes.Structure):
    # bh_cancel: one per waiting call, requested by close() (and by the
    # cancellation of an acquire_async()).
    _fields_ = [("waiting", ctypes.c_void_p * 8), ("state", ctypes.c_uint32), ("busy", ctypes.c_uint32)]


def library_path():
    """The libbulkhead this module loads: $BULKHEAD_LIBRARY, the build tree,
    the one installed with it, the system."""
    env = os.environ.get("BULKHEAD_LIBRARY")
    if env:
        return env
    here = pathlib.Path(__file__).resolve()
    if len(here.parents) > 3:  # bindings/python/bulkhead/ in a checkout; a copy may lie higher
        built = here.parents[3] / "build" / "client" / _SONAME
        if built.exists():
            return str(built)
        # cmake --install (and the .deb) put this file in
        # PREFIX/lib/python3/dist-packages/bulkhead/ and the library in
        # PREFIX/lib/, where the dynamic loader does not look under a
        # prefix it was not told of (nor before ldconfig ran).
        installed = here.parents[3] / _SONAME
        if here.parents[1].name == "dist-packages" and here.parents[2].name == "python3" and installed.exists():
            return str(installed)
    # The soname itself, not ctypes.util.find_library("bulkhead"): that
    # answers with whichever libbulkhead.so.N the loader's path or cache
    # holds first, of another ABI too, and runs ldconfig (or gcc) to learn it.
    return _SONAME


def _check_abi(lib, path):
    """Raises OSError unless `lib` is of libbulkhead.so.0's ABI: its
    functions in the version node BULKHEAD_1 (client/libbulkhead.map). A
    library of another ABI may have functions of the same names that take
    other arguments."""
    dlvsym = getattr(ctypes.CDLL(None), "dlvsym", None)  # glibc's; elsewhere, no check
    if dlvsym is None:
        return
    dlvsym.restype, dlvsym.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
    if not dlvsym(lib._handle, b"bh_client_open_opts", b"BULKHEAD_1"):
        raise OSError(errno.ELIBBAD, f"{path} is not libbulkhead of the ABI this module uses ({_SONAME}: "
                                     f"no bh_client_open_opts@BULKHEAD_1): install libbulkhead0, or set "
                                     f"$BULKHEAD_LIBRARY to the path of {_SONAME}")


def _load():
    path = library_path()
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        why = (f"cannot load libbulkhead ({e}): install libbulkhead0, or set $BULKHEAD_LIBRARY to the path of "
               f"libbulkhead.so")
        # dlopen() gives no errno: OSError(None, why) would begin "[Errno None] ".
        raise (OSError(why) if e.errno is None else OSError(e.errno, why)) from e
    _check_abi(lib, path)
    c_client, c_dep = ctypes.c_void_p, ctypes.c_void_p
    sigs = {
        "bh_client_open_opts": (ctypes.c_int, [ctypes.POINTER(_Options), ctypes.POINTER(c_client)]),
        "bh_client_close": (None, [c_client]),
        "bh_client_mode": (ctypes.c_int, [c_client]),
        "bh_client_status": (ctypes.c_char_p, [c_client]),
        "bh_dependency": (ctypes.c_int, [c_client, ctypes.c_char_p, ctypes.POINTER(c_dep)]),
        "bh_try_acquire": (ctypes.c_int, [c_dep, ctypes.POINTER(_Permit)]),
        "bh_release": (None, [ctypes.POINTER(_Permit), ctypes.c_int]),
        "bh_release_latency": (None, [ctypes.POINTER(_Permit), ctypes.c_int, ctypes.c_uint64]),
        "bh_limit": (ctypes.c_long, [c_dep]),
        "bh_inflight": (ctypes.c_long, [c_dep]),
        "bh_last_error": (ctypes.c_char_p, []),
        # BULKHEAD_1.1: absent from the oldest libbulkhead (then no acquire waits).
        "bh_acquire": (ctypes.c_int, [c_dep, ctypes.c_uint64, ctypes.POINTER(_Permit)]),
        "bh_permit_remaining_ns": (ctypes.c_uint64, [ctypes.POINTER(_Permit)]),
        # BULKHEAD_1.3: absent from an older libbulkhead (then the breaker
        # is always closed, and no partition can be named).
        "bh_breaker_state": (ctypes.c_int, [c_dep]),
        "bh_partition": (ctypes.c_int, [c_dep, ctypes.c_char_p, ctypes.POINTER(c_dep)]),
        # BULKHEAD_1.4: absent from an older libbulkhead (then close() waits
        # for a waiting acquire to end by itself).
        "bh_cancel_request": (None, [ctypes.POINTER(_Cancel)]),
        "bh_acquire_cancellable": (ctypes.c_int, [c_dep, ctypes.c_uint64, ctypes.POINTER(_Cancel),
                                                  ctypes.POINTER(_Permit)]),
    }
    optional = ("bh_acquire", "bh_permit_remaining_ns", "bh_breaker_state", "bh_partition", "bh_cancel_request",
                "bh_acquire_cancellable")
    for name, (restype, argtypes) in sigs.items():
        fn = getattr(lib, name, None)
        if fn is None and name in optional:
            continue
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


_lib = None


def _c():
    global _lib
    if _lib is None:
        _lib = _load()
    return _lib


def _c_string(text, what):
    """`text` as the C ABI takes it: a NUL inside would cut it short there."""
    if not isinstance(text, str):
        raise TypeError(f"{what} {text!r}: must be a str, not {type(text).__name__}")
    data = text.encode()
    if b"\0" in data:
        raise ValueError(f"{what} {text!r} has a NUL character")
    return data


def _raise(rc, what, named=None):
    """Raises the Python exception for a negative errno from the C ABI,
    naming `what` unless libbulkhead's reason starts with `named` (it names
    it already)."""
    reason = _c().bh_last_error().decode(errors='replace')
    why = reason if named is not None and reason.startswith(named) else f"{what}: {reason}"
    if rc == -errno.EINVAL:
        raise ValueError(why)
    raise OSError(-rc, why)  # FileNotFoundError, PermissionError, ... by errno


def _deadline_ns(timeout):
    """bh_acquire()'s deadline, on CLOCK_MONOTONIC (time.monotonic_ns's
    clock on Linux), `timeout` seconds from now."""
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not timeout >= 0:
        raise ValueError(f"timeout {timeout!r}: must be a number of seconds, 0 or more")
    no_deadline = 2**64 - 1  # BH_NO_DEADLINE
    if isinstance(timeout, float) and math.isinf(timeout):  # an int too large for a float is finite
        return no_deadline
    now = time.monotonic_ns()
    if timeout >= (no_deadline - 1 - now) / 1e9:  # before timeout * 1e9, which may overflow
        return no_deadline - 1
    return now + int(timeout * 1e9)


def _is_timeout(exc_type):
    """TimeoutError, or a timeout of socket, asyncio or concurrent.futures,
    which are TimeoutError only from Python 3.10 (socket) and 3.11 (the
    others) on; each from sys.modules, as no such exception is raised
    before its module is imported."""
    if issubclass(exc_type, TimeoutError):
        return True
    for module, name in (("socket", "timeout"), ("asyncio", "TimeoutError"), ("concurrent.futures", "TimeoutError")):
        timeout = getattr(sys.modules.get(module), name, None)
        if timeout is not None and issubclass(exc_type, timeout):
            return True
    return False


def _outcome_of(exc_type):
    """How a call whose ``with`` block ended with ``exc_type`` ended, as C++
    execute() counts a call that threw: none, a success; a timeout
    (TimeoutError, socket.timeout, asyncio's), dropped; any other Exception,
    failed (the circuit breaker counts both, and the limit policy backs off
    on drops); Rejected (another dependency's refusal inside the block) and
    what is no Exception (KeyboardInterrupt, SystemExit, a cancelled task),
    ignored: nothing said about this dependency."""
    if exc_type is None:
        return SUCCESS
    if issubclass(exc_type, Rejected) or not issubclass(exc_type, Exception):
        return IGNORE
    return DROPPED if _is_timeout(exc_type) else FAILED


def _refuse_to_copy(self):
    """__reduce__ of the classes that hold a libbulkhead handle: a copy, or
    an unpickled one in another process, would hold the same handle (pickle
    said only "cannot pickle '_thread.RLock' object")."""
    raise TypeError(f"a bulkhead.{type(self).__name__} cannot be pickled or copied: it holds this process's "
                    f"libbulkhead handle; open a Client in each process (a forked child may use its parent's)")


class Permit:
    """One admitted call. Use it as a context manager, or release it once."""

    __reduce__ = _refuse_to_copy

    def __init__(self, dependency):
        self._dependency = dependency
        self._permit = _Permit()

    def __bool__(self):
        """True while the permit holds an admission."""
        return bool(self._permit.dep)

    def release(self, outcome=SUCCESS, latency_ns=None):
        """Gives the permit back; latency_ns: a latency the caller measured
        itself (saves two clock reads). Releasing twice does nothing."""
        if not self._permit.dep:
            return  # released already, or never admitted
        # Checked before anything is given back: ctypes would refuse a str
        # with its own ArgumentError, and take any other int as ignored.
        if not isinstance(outcome, int) or isinstance(outcome, bool) or outcome not in (SUCCESS, DROPPED, IGNORE,
                                                                                          FAILED):
            raise ValueError(f"outcome {outcome!r}: must be bulkhead.SUCCESS, DROPPED, IGNORE or FAILED; "
                             f"the permit is still held")
        client = self._dependency._client  # its handle dies with the client
        if latency_ns is None:
            client._call_release(_c().bh_release, self._permit, outcome)
        else:
            # At most 2**64 - 1, which ctypes would otherwise take modulo
            # 2**64 (2**64 + 5 as 5 ns); the library counts 2**63 or more as 0.
            latency = min(max(0, int(latency_ns)), 2**64 - 1)
            client._call_release(_c().bh_release_latency, self._permit, outcome, latency)

    def remaining(self):
        """Seconds left of the deadline of a permit acquire(timeout=...)
        gave: the budget for the call itself, its wait taken off (0.0 once
        the deadline passed, or once released); None for a permit without a
        deadline (acquire() without a timeout, try_acquire())."""
        fn = getattr(_c(), "bh_permit_remaining_ns", None)
        if fn is None or fn.argtypes is None:
            raise OSError(errno.ENOSYS, f"{self._dependency.name}: this libbulkhead predates the wait queue")
        left = fn(ctypes.byref(self._permit))
        return None if left == 2**64 - 1 else left / 1e9

    def success(self):
        self.release(SUCCESS)

    def failed(self):
        """The dependency answered an error: counted by its circuit breaker,
        not a latency sample."""
        self.release(FAILED)

    def dropped(self):
        """Timed out or met back-pressure: counted, its latency not kept."""
        self.release(DROPPED)

    def ignore(self):
        """Neither (cancelled, the caller's own error): not a sample."""
        self.release(IGNORE)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.release(_outcome_of(exc_type))
        return False

    def __del__(self):
        # A permit forgotten unreleased is given back as ignored, like the
        # C++ Permit's destructor.
        if _lib is not None and self._permit.dep and self._dependency._client._handle:
            try:
                self.release(IGNORE)
            except ValueError:
                pass  # the client closed meanwhile: nothing left to give back


class Dependency:
    """A named downstream dependency; valid while its Client is open."""

    __reduce__ = _refuse_to_copy

    def __init__(self, client, name, handle):
        self._client = client  # keeps the client, and so the handle, alive
        self.name = name
        self._handle = handle

    def try_acquire(self, timeout=None):
        """A Permit, or None when the call is not admitted. timeout: as for
        acquire()."""
        permit, rc = self._acquire(timeout)
        return permit if rc == 0 else None

    def acquire(self, timeout=None):
        """A Permit, or raises Rejected when the call is not admitted.

        timeout None or 0: never blocks; refused at the limit. timeout in
        seconds (up to math.inf): at the limit, waits up to that long in the
        dependency's wait queue for a permit (bh_acquire), other threads
        running meanwhile; refused at once when bulkheadd gives the
        dependency no queue (max_queue = 0, or standalone) or it is full.
        On the main thread, signal handlers run meanwhile too: one that
        raises (KeyboardInterrupt) cancels the wait, a permit admitted in
        that instant given back, and the exception propagates."""
        permit, rc = self._acquire(timeout)
        if rc > 0:
            raise Rejected(self.name, rc)
        return permit

    async def acquire_async(self, timeout=None):
        """acquire() for asyncio: a call that may wait waits on a thread of
        its own, and the cancellation of the task that awaits it
        (asyncio.wait_for's timeout, a request its client gave up) ends the
        wait at once: the place in the queue is given up, and a permit
        admitted in that instant is given back as ignored. Not on the
        loop's default executor: waits would take its few threads from the
        rest of the loop (getaddrinfo, to_thread), a permit holder's
        included, whose release they wait for. timeout None or 0 never
        waits, and runs on the loop. (With a libbulkhead older than
        bh_acquire_cancellable(), the task's cancellation ends only the
        await: the wait goes on, to its timeout, and a permit it gets is
        given back.)"""
        if timeout is None or timeout == 0:
            return self.acquire(timeout)
        import asyncio

        cancel = _Cancel()
        loop = asyncio.get_running_loop()
        waiting = loop.create_future()
        abandoned = []  # not empty once the awaiting task was cancelled (set on the loop)

        def wait():
            result = error = None
            try:
                result = self._acquire_waiting(timeout, cancel)
            except BaseException as e:  # the awaiting task raises it
                error = e
            try:
                loop.call_soon_threadsafe(_settle, waiting, result, error, abandoned)
            except RuntimeError:  # the loop closed meanwhile
                if result is not None:
                    result.release(IGNORE)

        threading.Thread(target=wait, name="bulkhead acquire_async", daemon=True).start()
        try:
            # Shielded: cancelling the task must not drop the wait's result,
            # which may be a permit to give back.
            return await asyncio.shield(waiting)
        except asyncio.CancelledError:
            abandoned.append(True)
            _request(cancel)
            raise

    def _acquire_waiting(self, timeout, cancel):
        permit, rc = self._acquire(timeout, cancel)
        if rc > 0:
            raise Rejected(self.name, rc)
        return permit

    def _acquire(self, timeout, cancel=None):
        permit = Permit(self)
        deadline = None if timeout is None else _deadline_ns(timeout)
        if timeout is None or timeout == 0:
            rc = self._client._call_admitting(_c().bh_try_acquire, self._handle, ctypes.byref(permit._permit))
        else:
            undo = lambda: _c().bh_release(ctypes.byref(permit._permit), IGNORE)  # noqa: E731
            fn = getattr(_c(), "bh_acquire_cancellable", None)
            if fn is not None and fn.argtypes is not None:
                cancel = _Cancel() if cancel is None else cancel
                rc = self._client._call_waiting(fn, self._handle, deadline, ctypes.byref(cancel),
                                                ctypes.byref(permit._permit), undo=undo, cancel=cancel)
            else:
                fn = getattr(_c(), "bh_acquire", None)
                if fn is None or fn.argtypes is None:
                    raise OSError(errno.ENOSYS, f"{self.name}: this libbulkhead predates the wait queue")
                rc = self._client._call_waiting(fn, self._handle, deadline, ctypes.byref(permit._permit), undo=undo)
        if rc < 0:
            _raise(rc, self.name)
        return permit, rc

    def breaker_state(self):
        """BREAKER_CLOSED, BREAKER_OPEN or BREAKER_HALF_OPEN, as bulkheadd
        last published it (always closed standalone, or with a libbulkhead
        older than the breaker)."""
        fn = getattr(_c(), "bh_breaker_state", None)
        if fn is None or fn.argtypes is None:
            self._client._call(lambda: None)  # a closed client still raises
            return BREAKER_CLOSED
        return self._client._call(fn, self._handle)

    def partition(self, name):
        """The Dependency for calls of one of this dependency's partitions
        (e.g. "critical"), as bulkheadd's config declares them; raises
        FileNotFoundError for a partition the dependency does not have."""
        fn = getattr(_c(), "bh_partition", None)
        if fn is None or fn.argtypes is None:
            raise OSError(errno.ENOSYS, f"{self.name}/{name}: this libbulkhead predates partitions")
        handle = ctypes.c_void_p()
        rc = self._client._call(fn, self._handle, _c_string(name, "partition name"), ctypes.byref(handle))
        if rc < 0:
            _raise(rc, f"{self.name}/{name}")
        return Dependency(self._client, f"{self.name}/{name}", handle)

    @property
    def limit(self):
        """The limit in force, in calls."""
        return self._client._call(_c().bh_limit, self._handle)

    @property
    def inflight(self):
        """Calls in flight host-wide (standalone: in this process)."""
        return self._client._call(_c().bh_inflight, self._handle)


def _request(cancel):
    """bh_cancel_request(cancel); nothing with a libbulkhead older than it."""
    request = getattr(_c(), "bh_cancel_request", None)
    if request is not None and request.argtypes is not None:
        request(ctypes.byref(cancel))


class _Waiter:
    """The thread that makes the main thread's waiting acquires, while the
    main thread waits for it on a lock: Python runs signal handlers only on
    the main thread, between its own bytecodes, so not during a call into
    libbulkhead, however long it waits, but a lock's wait lets them run
    (Ctrl-C's KeyboardInterrupt, a SIGTERM handler). One per process, made
    by the first such wait, left blocked on its lock between calls: a thread
    started per call would cost more than the call itself."""

    # How often the main thread's wait looks for a handler to run that its
    # lock's wait did not: a signal that comes just before that wait blocks
    # does not interrupt it (CPython runs handlers when a signal interrupts
    # the wait, not when one came before it).
    _POLL = 0.1

    def __init__(self):
        self._call = self._result = None
        self._called = threading.Lock()
        self._called.acquire()
        # Released as each call returns, to wake the main thread; _returns,
        # counted before, says whether the call returned: a handler's
        # exception may come as the lock's wait ends, the lock taken, or
        # that wait may take a release the previous call left.
        self._returned = threading.Lock()
        self._returned.acquire()
        self._returns = 0
        self._busy = False
        threading.Thread(target=self._serve, name="bulkhead waiter", daemon=True).start()

    def _serve(self):
        # A signal sent to the process goes to a thread that does not block
        # it: the main thread, whose wait it must interrupt, not this one.
        # But for a fault's, which comes to the faulting thread whatever its
        # mask, blocked only to bypass a handler (faulthandler's report).
        faults = {signal.SIGSEGV, signal.SIGBUS, signal.SIGFPE, signal.SIGILL}
        signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals() - faults)
        while True:
            self._called.acquire()
            fn, args = self._call
            try:
                rc = fn(*args)
                if rc < 0:  # raised here: bh_last_error() is this thread's
                    _raise(rc, fn.__name__, named=fn.__name__)
                self._result = rc, None
            except BaseException as e:  # the main thread raises it
                self._result = None, e
            self._returns += 1
            self._returned.release()

    def call(self, fn, args, cancel):
        """(fn(*args), None), fn a waiting acquire with `cancel`, made on the
        waiter's thread. If a signal handler raises meanwhile, the call is
        cancelled, and so returns at once: (its rc, the handler's
        exception), for the caller to give back a permit admitted in that
        instant before it raises the exception. A handler that returns lets
        the wait go on, its place in the queue kept. A handler's own waiting
        acquire, while this one waits, is made directly: the thread is this
        one's."""
        if self._busy:
            return fn(*args), None
        self._busy = True
        self._call = fn, args
        returned = self._returns + 1
        started = False
        interrupted = None
        while self._returns != returned:
            try:
                # Inside the try: a handler may raise as soon as the call
                # has started, and it must be waited for all the same (it
                # uses the client's handle, and may take a permit).
                if not started:
                    started = True
                    self._called.release()
                self._returned.acquire(timeout=self._POLL)
            except BaseException as e:
                _request(cancel)
                # The first is raised: one that comes as the cancelled call
                # returns (another Ctrl-C) has nothing left to interrupt.
                if interrupted is None:
                    interrupted = e
        self._busy = False
        rc, error = self._result
        self._call = self._result = None  # the permit's buffer, an exception's frames: not kept
        if error is not None and interrupted is None:
            raise error
        return rc, interrupted


def _main_thread_waiter():
    """The process's _Waiter, made at the first use; None when no thread
    can be started (Python 3.12 refuses one at interpreter shutdown, in an
    atexit handler): the wait is then a call of the main thread's own, as
    before there was a _Waiter."""
    global _waiter
    if _waiter is None:
        try:
            _waiter = _Waiter()
        except RuntimeError:
            return None
    return _waiter


# _main_thread_waiter()'s; none in a forked child, where its thread is not.
_waiter = None
# The thread Python runs signal handlers on (in a forked child, the thread
# that forked), read once: threading.main_thread().ident costs two calls.
_main_thread_ident = threading.main_thread().ident


def _settle(waiting, result, error, abandoned):
    """The end of an acquire_async()'s wait, on its loop. If the awaiting
    task was cancelled meanwhile, a permit admitted all the same is given
    back, and a refusal dropped: set on the future, no one would take it
    (and asyncio would log it, unretrieved, when it is collected)."""
    if abandoned:
        if result is not None:
            result.release(IGNORE)
    elif error is not None:
        waiting.set_exception(error)
    else:
        waiting.set_result(result)


# Every open Client, for the fork handler below.
_clients = weakref.WeakSet()


def _after_fork_in_child():
    global _waiter, _main_thread_ident
    _waiter, _main_thread_ident = None, threading.get_ident()
    for client in list(_clients):
        client._after_fork_in_child()


os.register_at_fork(after_in_child=_after_fork_in_child)


class Client:
    """A process's connection to bulkheadd's segment (or standalone mode).

    segment: the segment's name (None: $BULKHEAD_SEGMENT, else "bulkhead").
    static_limit: the limit in standalone mode (0: $BULKHEAD_STATIC_LIMIT,
    else none). require_segment: raise FileNotFoundError instead of running
    standalone when there is no segment."""

    __reduce__ = _refuse_to_copy

    def __init__(self, segment=None, static_limit=0, require_segment=False):
        options = _Options(_c_string(segment, "segment name") if segment is not None else None, static_limit,
                           _OPEN_REQUIRE_SEGMENT if require_segment else 0)
        handle = ctypes.c_void_p()
        rc = _c().bh_client_open_opts(ctypes.byref(options), ctypes.byref(handle))
        if rc < 0:
            named = segment if segment is not None else os.environ.get("BULKHEAD_SEGMENT") or "bulkhead"
            _raise(rc, f"segment {named}", named="segment ")
        self._handle = handle
        self._dependencies = {}
        # Held across each call into libbulkhead (ctypes lets other threads
        # run meanwhile), so that close() never frees what a call uses.
        # Reentrant: a Permit collected during a call may release itself.
        # A waiting acquire does not hold it while it waits (every other
        # call would wait behind it), but counts itself in _waiting (per
        # thread), which close() waits to see empty. Meanwhile (_closing)
        # permits may still be released, which may be what a waiter waits
        # for, and nothing else may start. A close() on a thread that is in
        # a waiting call itself (a signal handler's, run on the main thread
        # while the _Waiter's thread makes its call, which counts as the
        # main thread's, or as a wait returned) cannot wait for it: that
        # call closes the client as it ends (_close_after_waits).
        self._lock = threading.RLock()
        self._waiting = {}
        self._closing = False
        self._close_after_waits = False
        # Permits admitted and not released yet, and whether close() came
        # while some were: then the last one's release closes the client.
        self._held = 0
        self._close_at_last_release = False
        self._no_waiters = threading.Condition(self._lock)
        # The cancels of the waiting acquires, which close() requests, by id
        # (a ctypes structure is not hashable).
        self._cancels = {}
        _clients.add(self)

    def _after_fork_in_child(self):
        """The child has one thread, the one that forked: the lock may be
        another's (every call of the child would wait for it forever), and
        _waiting may count waits no thread of the child makes (close()
        would wait for them forever). libbulkhead itself rebinds the client
        to a process slot of the child's (its own fork handlers)."""
        self._lock = threading.RLock()
        self._no_waiters = threading.Condition(self._lock)
        self._waiting = {}
        self._held = 0  # those held at the fork are the parent's: the child's close() waits for none
        self._cancels = {}  # the parent's waiting calls

    def dependency(self, name):
        """The Dependency called name (1 to 47 of A-Z a-z 0-9 . _ -)."""
        dep = self._dependencies.get(name)
        if dep is None:
            handle = ctypes.c_void_p()
            # Without the lock, as a waiting acquire: bh_dependency() waits up
            # to a second for another process's unfinished claim of the name's
            # slot, and every other call on the client would wait with it.
            # A handle read after close() began is refused before it is used.
            rc = self._call_waiting(_c().bh_dependency, self._handle, _c_string(name, "dependency name"),
                                    ctypes.byref(handle))
            if rc < 0:
                _raise(rc, name, named="dependency ")
            dep = self._dependencies.setdefault(name, Dependency(self, name, handle))
        return dep

    @property
    def standalone(self):
        """True when no segment was found: limits are this process's own."""
        return self._call_client(_c().bh_client_mode) == MODE_STANDALONE

    @property
    def status(self):
        """A one-line description of the client's state."""
        return self._call_client(_c().bh_client_status).decode(errors="replace")

    def close(self):
        """Closes the client: no call starts after it. Idempotent, and
        safe while other threads use it: it waits for the call each is in.
        A waiting acquire is cancelled: it leaves the queue and raises
        ValueError (with a libbulkhead older than bh_acquire_cancellable(),
        it is waited for until it is admitted or refused, its timeout at
        most). While it waits, permits may still be released but nothing
        else starts, and a waiter admitted meanwhile gives its permit back
        and raises ValueError. Called on a
        thread in a waiting call (a signal handler's), it returns at once,
        and the client closes as the last waiting call ends. With permits
        still held, it returns, and the client closes at the last one's
        release: closed before, it would keep them taken host-wide, and its
        process slot, until the process exits (nothing could give them back
        then)."""
        with self._lock:
            self._closing = True  # calls from now on raise ValueError, but for releases
            self._dependencies.clear()
            for cancel in self._cancels.values():
                _request(cancel)
            if threading.get_ident() in self._waiting:
                self._close_after_waits = True  # waiting for that call here would wait forever
                return
            while self._waiting:
                self._no_waiters.wait()
            if self._held > 0:
                self._close_at_last_release = True
                return
            handle, self._handle = self._handle, None
            if handle:
                _c().bh_client_close(handle)

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        self.close()
        return False

    def __del__(self):
        # A client dropped unclosed is closed when Python collects it: in
        # shared mode each open client holds one of the host's process
        # slots (max_processes), and those of clients dropped one after
        # another would fill the table for every process on the host.
        # Nothing can be waiting in it then (a waiter's frame would keep it
        # alive); at exit, once the module is torn down, it is left alone.
        # A permit collected in the same pass (the client is always in a
        # cycle with its dependencies) may be finalized after it, in no
        # order Python promises: then its release closes the client.
        if _lib is not None and getattr(self, "_handle", None):
            self.close()

    def _refuse_if_closed(self, releasing=False):
        """ValueError once close() has begun; for a release, once it ended
        (a waiting acquire that close() waits for may be waiting for one).
        Called with the lock held."""
        if (not self._handle) if releasing else self._closing:
            raise ValueError("the client is closed")

    def _call(self, fn, *args):
        """fn(*args), a call on one of this client's handles, with its lock
        held; ValueError once close() has begun."""
        with self._lock:
            self._refuse_if_closed()
            return fn(*args)

    def _call_admitting(self, fn, *args):
        """fn(*args), an admission, as _call(), counting the permit it gives."""
        with self._lock:
            self._refuse_if_closed()
            rc = fn(*args)
            if rc == 0:
                self._held += 1
            return rc

    def _call_release(self, fn, permit, *args):
        """fn(permit, *args), a release, as _call() but allowed until close()
        ends; nothing when the permit is empty (another thread released it
        meanwhile). The last permit of a client close() was called on
        closes it."""
        with self._lock:
            self._refuse_if_closed(releasing=True)
            if not permit.dep:
                return
            fn(ctypes.byref(permit), *args)
            if self._held > 0:  # 0: a permit admitted as an exception (Ctrl-C) came, so not counted
                self._held -= 1
            if self._close_at_last_release and not self._held:
                self.close()

    def _call_waiting(self, fn, *args, undo=None, cancel=None):
        """fn(*args), a call that may block, as _call() but without the lock
        held while it runs; close() waits for it all the same. If close()
        began meanwhile, undo() gives back the permit fn admitted (nothing
        for one it left empty) while the handle is still valid, however fn
        ended: a Ctrl-C that came while it waited is raised as it returns,
        admitted or not. Admitted, it then raises ValueError: the client
        closed. `cancel`, the call's _Cancel, is requested by close(). On
        the main thread, a call with a `cancel` is made on the _Waiter's
        thread: a signal handler that raises meanwhile cancels it, and
        undo() gives back what it admitted before the exception is raised."""
        me = threading.get_ident()
        with self._lock:
            self._refuse_if_closed()
            self._waiting[me] = self._waiting.get(me, 0) + 1
            if cancel is not None:
                self._cancels[id(cancel)] = cancel
        rc = closing = interrupted = None
        kept = False
        try:
            waiter = _main_thread_waiter() if cancel is not None and me == _main_thread_ident else None
            if waiter is not None:
                rc, interrupted = waiter.call(fn, args, cancel)
            else:
                rc = fn(*args)
        finally:
            with self._lock:
                try:
                    closing = self._closing
                    if undo is not None and (closing or interrupted is not None):
                        undo()
                    elif undo is not None and rc == 0:  # admitted: a permit
                        self._held += 1
                        kept = True
                finally:
                    self._cancels.pop(id(cancel), None)
                    self._waiting[me] -= 1
                    if not self._waiting[me]:
                        del self._waiting[me]
                    if not self._waiting:
                        self._no_waiters.notify_all()
                        if self._close_after_waits:
                            if kept:  # this thread's signal handler closed it since
                                undo()
                                self._held -= 1
                                closing = True
                            self.close()
        if interrupted is not None:
            raise interrupted
        if closing and rc in (0, _REJECT_CANCELLED) and undo is not None:
            raise ValueError("the client closed while the call waited")
        return rc

    def _call_client(self, fn, *args):
        """fn(the client's handle, *args), as _call()."""
        with self._lock:
            self._refuse_if_closed()
            return fn(self._handle, *args)
