"""eagle3_runner.common.console: a quiet terminal and the steps' log files."""

from __future__ import annotations


def test_a_quiet_terminal_leaves_logging_as_it_found_it(tmp_path, caplog):
    """The CLI runs in process in tests: after ``eagle3 run`` (quiet), INFO records of this package
    still reach other handlers (caplog's here), and no step redirects descriptors any more."""
    import logging

    from eagle3_runner.common import console

    log = logging.getLogger("eagle3_runner.test")
    caplog.set_level(logging.INFO)
    with console.quiet_terminal():
        assert console.quiet()
        with console.step_output(tmp_path / "step.log") as path:
            assert path == tmp_path / "step.log"
    log.info("after the run")
    assert [r.getMessage() for r in caplog.records] == ["after the run"]
    assert not console.quiet()
    with console.step_output(tmp_path / "other.log") as path:
        assert path is None


def test_a_step_s_output_and_children_go_to_its_log(tmp_path, caplog):
    """Inside a step, descriptors 1 and 2 (and a child process's) append to the step's log; this
    package's milestones still reach the terminal copy."""
    import logging
    import os
    import subprocess
    import sys

    from eagle3_runner.common import console

    log = logging.getLogger("eagle3_runner.test")
    caplog.set_level(logging.INFO)  # the CLI's level (pytest's root is at WARNING)
    terminal_copy = tmp_path / "terminal.txt"
    saved = os.dup(2)
    with open(terminal_copy, "wb") as t:
        os.dup2(t.fileno(), 2)
        try:
            with console.quiet_terminal():
                with console.step_output(tmp_path / "logs" / "s.log"):
                    os.write(1, b"stdout line\n")
                    subprocess.run([sys.executable, "-c", "import sys; print('child', file=sys.stderr)"], check=True)
                    console.milestone(log, "a milestone")
        finally:
            os.dup2(saved, 2)
            os.close(saved)
    step_log = (tmp_path / "logs" / "s.log").read_text()
    assert "stdout line" in step_log and "child" in step_log
    shown = terminal_copy.read_text()
    assert "a milestone" in shown and "child" not in shown and "stdout line" not in shown
