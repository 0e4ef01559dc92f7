"""The end of a script that forks while another thread holds a lock: it waits for the
child and kills it once it has hung (tests/test_threads.py, tests/distributed/test_sync.py).

``WAIT_FOR_CHILD`` is source text: the scripts run in a new interpreter (``python -c``),
where frameworks other tests loaded cannot object to the fork, so it is pasted into them.
It needs ``os``, ``signal``, ``sys`` and ``time`` imported there.
"""

from __future__ import annotations

__all__ = ["WAIT_FOR_CHILD"]

WAIT_FOR_CHILD = """
def wait_for_child(pid, hung):
    # The child's exit code, or the script exits with `hung` once the child has not
    # ended within 20 s (it is killed first, so that no hung child outlives the test).
    deadline = time.monotonic() + 20
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            sys.exit(hung)
        time.sleep(0.01)
"""
