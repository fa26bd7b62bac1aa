"""Stopping at an agreed step on a signal (``mpistage stage --stop-signals`` from Python).

The handlers are the library's (``mpistage::install_stop_signals``, parsed by the CLI's own
``--stop-signals`` parser): each only sets a process-wide, async-signal-safe flag that every
loader's agreement carries, so a signal that reaches one rank ends the epoch at the same step
on every rank (``Epoch.stopped`` true there). The trainer then saves ``loader.state_dict()``
(identical on every rank) and exits, e.g. with ``EXIT_STOPPED`` (75, as the CLI) for a job
script to requeue::

    mpistage.install_stop_signals("USR1,TERM")          # collective
    for batch in (epoch := loader.epoch(e)):
        ...
    if epoch.stopped:
        torch.save({"loader": loader.state_dict(), ...}, "ckpt.pt")
        sys.exit(mpistage.EXIT_STOPPED)
"""
from . import _mpistage as _core
from .loader import _handle

#: Exit code of a run a stop signal ended (EX_TEMPFAIL, "try again later"), as ``mpistage stage``.
EXIT_STOPPED = _core.EXIT_STOPPED


def _signal_list(signals):
    if isinstance(signals, str):
        return signals
    if isinstance(signals, int) and not isinstance(signals, bool):
        return str(int(signals))  # signal.SIGTERM is an int
    try:
        items = list(signals)
    except TypeError:
        raise TypeError(f"signals= takes a str ('USR1,TERM'), a signal number or a list of them, "
                        f"got {type(signals).__name__} {signals!r}") from None
    out = []
    for s in items:
        if isinstance(s, str):
            out.append(s)
        elif isinstance(s, int) and not isinstance(s, bool):
            out.append(str(int(s)))
        else:
            raise TypeError(f"signals= takes names or numbers, got an item {type(s).__name__} "
                            f"{s!r}")
    return ",".join(out)


def install_stop_signals(signals="USR1,TERM", *, comm=None):
    """Collective over ``comm`` (default ``COMM_WORLD``): installs, for each signal, a handler
    that asks every loader of the process to stop at its next agreed step (as
    ``mpistage stage --stop-signals``, whose default ``USR1,TERM`` is the default here). The
    handler replaces the signal's earlier handler (Python's own included; ``"INT"`` thus
    stops Ctrl-C's ``KeyboardInterrupt``). ``"none"`` installs nothing.

    Args:
        signals: "USR1,TERM" (names with or without SIG, or numbers), a signal number
            (``signal.SIGTERM``) or a list of names/numbers.
    Returns:
        The installed signals' names, e.g. ``["USR1", "TERM"]``.
    Raises:
        TypeError: ``signals=`` of the wrong type.
        ConfigError: an entry that is not a catchable signal (SIGKILL, SIGSTOP, unknown),
            naming it; the same on every rank (nothing installed where it fails).
    """
    text = _signal_list(signals)
    try:
        return _core.install_stop_signals(_handle(comm), text)
    except _core.ConfigError as e:
        raise _core.ConfigError(str(e).replace("stage: --stop-signals", "install_stop_signals: "
                                               "signals=")) from None


def request_stop():
    """Local, async-signal-safe: asks every loader of this process to stop at its next agreed
    step (what the handlers do; callable from a Python signal handler or another thread)."""
    _core.request_stop()


def stop_requested():
    """Local: whether a stop was requested in this process (a signal, or ``request_stop()``).
    Other ranks may not have been asked: decide collectively with ``Epoch.stopped``."""
    return _core.stop_requested()


def stop_signal():
    """Local: the name of the signal that requested the stop on this rank (``"TERM"``,
    ``"USR1"``, or the number), None when none did (no stop, or ``request_stop()``)."""
    return _core.stop_signal()


def clear_stop_request():
    """Local: forgets the stop request. The request stays set until this is called, so later
    epochs stop at their first step; call it on every rank after handling the stop, to go on."""
    _core.clear_stop_request()
