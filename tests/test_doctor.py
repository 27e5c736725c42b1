"""`tkcourse doctor` tests behaviour (a kernel in the interpreter, the widget extension), not versions."""

import pytest

from tkcourse import doctor

OK_PROBE = lambda: (doctor.OK, "probe ran")  # noqa: E731
OK_WIDGETS = lambda: (True, "enabled")  # noqa: E731
OK_COMPILER = lambda: (doctor.OK, "compiles")  # noqa: E731


def test_the_probe_runs_a_kernel_here():
    status, msg = doctor.interpreter_probe()
    assert status == doctor.OK, msg


@pytest.mark.parametrize("code, expect", [
    ("raise SystemExit('InterpreterError: boom')", "boom"),
    ("print('PROBE-WRONG at [3]: got [1.0], want [7.0]')", "wrong numbers"),
    ("import sys; sys.exit(3)", "exit status 3"),
])
def test_a_failing_probe_is_bad_and_says_why(monkeypatch, code, expect):
    monkeypatch.setattr(doctor, "_PROBE", code)
    status, msg = doctor.interpreter_probe()
    assert status == doctor.BAD and expect in msg


@pytest.mark.skipif(not doctor.mode.INTERPRET, reason="asked in the interpreter only")
def test_the_compile_probe_refuses_a_break_and_takes_a_right_kernel_here():
    status, msg = doctor.compile_probe()
    assert status == doctor.OK, msg


@pytest.mark.parametrize("code, expect", [
    ("print('COMPILE-TOOK-BREAK')", "took a break in a loop"),
    ("raise ImportError('no NVIDIA backend in this build')", "no NVIDIA backend"),
])
def test_a_compile_probe_that_fails_warns_and_says_why(monkeypatch, code, expect):
    monkeypatch.setattr(doctor, "_COMPILE_PROBE", code)
    status, msg = doctor.compile_probe()
    assert status == doctor.WARN and expect in msg and "passes the check" in msg


def test_a_hanging_probe_times_out(monkeypatch):
    monkeypatch.setattr(doctor, "_PROBE", "import time; time.sleep(30)")
    status, msg = doctor.interpreter_probe(timeout=1)
    assert status == doctor.BAD and "did not finish" in msg


def test_versions_outside_the_tested_set_warn_but_never_fail(monkeypatch, capsys):
    """The old rule (triton < 3.9 with numpy >= 2.4 is BAD) cried wolf: a version is never a failure."""
    fake = {"triton": "3.6.0", "numpy": "2.5.2", "torch": "2.14.1"}
    pins = doctor.tested_versions()  # the rest as tested: a package this machine lacks is another test's matter
    monkeypatch.setattr(doctor, "_version", lambda d: fake.get(d) or pins.get(d, "1.0"))
    monkeypatch.setattr(doctor, "interpreter_probe", OK_PROBE)
    monkeypatch.setattr(doctor, "widget_extension", OK_WIDGETS)
    monkeypatch.setattr(doctor, "compile_probe", OK_COMPILER)
    monkeypatch.setattr(doctor.mode, "INTERPRET", True)  # the CPU set's pins, on a GPU machine too
    rows = {what: (value, status) for what, value, status in doctor.report(OK_PROBE, OK_WIDGETS, OK_COMPILER)}
    for dist, v in fake.items():
        if pins.get(dist) and not doctor._same_release(v, pins[dist]):
            assert rows[dist][1] == doctor.WARN and f"tested: {pins[dist]}" in rows[dist][0]
    assert all(status != doctor.BAD for _, status in rows.values())
    assert doctor.main() == 0 and "BAD" not in capsys.readouterr().out


def test_the_pinned_versions_are_ok(monkeypatch):
    pins = doctor.tested_versions()
    assert {"torch", "triton", "numpy", "jupyterlab_widgets"} <= set(pins)
    monkeypatch.setattr(doctor, "_version", lambda d: pins.get(d, "1.0") + ("+cpu" if d == "torch" else ""))
    monkeypatch.setattr(doctor.mode, "INTERPRET", True)
    rows = doctor.report(OK_PROBE, OK_WIDGETS, OK_COMPILER)
    assert all(status == doctor.OK for *_, status in rows), rows


def test_a_missing_package_or_widget_extension_is_bad():
    rows = {w: s for w, _, s in doctor.report(OK_PROBE, lambda: (False, "missing"))}
    assert rows["widgets"] == doctor.BAD
    rows = {w: s for w, _, s in doctor.report(lambda: (doctor.BAD, "fails"), OK_WIDGETS)}
    assert rows["interpreter"] == doctor.BAD


def test_doctor_reports_nothing_false_here(capsys):
    """On the installed environment (CI installs the pinned set) every row is ok or a warning."""
    pytest.importorskip("jupyterlab", reason="the dev set is not installed here (a GPU machine's runtime wheels)")
    rc = doctor.main()
    out = capsys.readouterr().out
    assert rc == 0 and "BAD" not in out, out
    assert "a tiny kernel runs in Triton's interpreter" in out


def test_a_gpu_older_than_triton_supports_warns_with_the_way_out(monkeypatch):
    monkeypatch.setattr(doctor.mode, "INTERPRET", False)
    t4 = {"gpu": "Tesla T4", "sms": 40, "memory_gib": 14.7, "capability": "7.5", "arch": "sm_75"}
    what, text, status = doctor.gpu_row(t4)
    assert status == doctor.WARN and "sm_75" in text and "TRITON_INTERPRET=1 make lab" in text
    h200 = dict(t4, gpu="NVIDIA H200", sms=132, capability="9.0", arch="sm_90")
    assert doctor.gpu_row(h200) == ("gpu", "NVIDIA H200, 132 SMs, 14.7 GiB, sm_90", doctor.OK)
    assert doctor.gpu_row(dict(t4, capability="8.0"))[2] == doctor.OK
