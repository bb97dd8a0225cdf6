"""The worker pool (kernelkit.worker) on a CPU machine: real `python -m kernelkit` client processes
and a real pool, whose jobs here stop before the GPU (a skipped baseline, bad input)."""

from __future__ import annotations

import contextlib
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from conftest import REPO, default_config, kit_env, pool_pids

from kernelkit.records import write_record
from kernelkit.timing import TimingSettings
from kernelkit import worker_client as worker


@pytest.fixture
def pool_env(tmp_path):
    """A pool of its own for this test: its own lock directory, and a keyed variable no other pool has."""
    env = kit_env(KERNELKIT_LOCK_DIR=str(tmp_path / "locks"), KERNELKIT_WORKER="1", KERNELKIT_WORKER_PROCESSES="2",
                  KERNELKIT_WORKER_IDLE_S="3", KERNELKIT_TEST_POOL=uuid.uuid4().hex)
    yield env
    name = _address(env)[1:]
    for pid in pool_pids(name):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def _address(env):
    code = "from kernelkit.worker_client import pool_address; print(repr(pool_address()))"
    return eval(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,  # noqa: S307
                               check=True).stdout)


def _listening(address):
    """Whether the abstract socket is bound, read from the kernel's table (a probe connection
    would count as a job and keep the pool awake)."""
    return any(line.split()[-1] == "@" + address[1:] for line in Path("/proc/net/unix").read_text().splitlines()[1:]
               if len(line.split()) >= 8)


def _kit(argv, env, cwd=REPO):
    return subprocess.run([sys.executable, "-m", "kernelkit", *argv], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def _skipped_timing(tmp_path, name):
    """A timing job of a baseline the correctness record skipped: it writes its record, with its
    job clock, and touches no GPU."""
    correctness = tmp_path / "correctness.json"
    write_record(correctness, {"passed": True, "layouts": ["t32"], "skipped": {"torch": "torch is not here"},
                               "source_sha256": "x"})
    output = tmp_path / f"{name}.json"
    argv = ["time", "--kernel", "rmsnorm", "--shape", "512x128", "--layout", "torch", "--repeat", "1",
            "--order-seed", "0", "--order-key", "0", "--cache", "warm",
            "--settings", TimingSettings.json_from_config(default_config()), "--correctness", str(correctness),
            "--output", str(output)]
    return argv, output


def test_jobs_run_one_after_another_in_the_same_worker_with_their_own_clock(tmp_path, pool_env):
    pool_env = {**pool_env, "KERNELKIT_WORKER_PROCESSES": "1"}  # unkeyed: the fixture's pool, of one process
    argv, first = _skipped_timing(tmp_path, "first")
    began = time.time()
    done = _kit(argv, pool_env)
    assert done.returncode == 0, done.stderr
    assert "skipped (torch is not here)" in done.stdout
    argv_second = [*argv[:-1], str(tmp_path / "second.json")]
    done = _kit(argv_second, pool_env)
    assert done.returncode == 0, done.stderr
    jobs = [json.loads((tmp_path / f"{name}.json").read_text())["job"] for name in ("first", "second")]
    assert jobs[0]["worker"]["pid"] == jobs[1]["worker"]["pid"]
    # Started by the first job's process: the pool began after it.
    assert jobs[0]["started_unix_s"] < jobs[0]["worker"]["pool_started_unix_s"] <= jobs[0]["worker"]["started_unix_s"]
    assert [job["worker"]["job_number"] for job in jobs] == [1, 2]
    # The clock starts with the client's process, not with the worker's, which started before the second client.
    assert jobs[1]["started_unix_s"] > jobs[1]["worker"]["started_unix_s"]
    assert began - 1 < jobs[0]["started_unix_s"] < jobs[0]["ended_unix_s"]


def test_two_repeats_of_a_target_run_in_two_processes_even_with_pools_of_one_worker(tmp_path, pool_env):
    pool_env = {**pool_env, "KERNELKIT_WORKER_PROCESSES": "1"}
    argv, _ = _skipped_timing(tmp_path, "rep")
    pids = {}
    for name, repeat in (("first", "1"), ("second", "2"), ("again", "1")):
        output = tmp_path / f"{name}.json"
        done = _kit([*argv[:argv.index("--repeat") + 1], repeat, *argv[argv.index("--repeat") + 2:-1], str(output)], pool_env)
        assert done.returncode == 0, done.stderr
        pids[name] = json.loads(output.read_text())["job"]["worker"]["pid"]
    assert pids["first"] == pids["again"] != pids["second"]


def test_a_job_in_its_own_process_names_no_worker(tmp_path, pool_env):
    argv, output = _skipped_timing(tmp_path, "own")
    done = _kit(argv, {**pool_env, "KERNELKIT_WORKER": "0"})
    assert done.returncode == 0, done.stderr
    assert json.loads(output.read_text())["job"]["worker"] is None


@pytest.mark.parametrize("argv", [
    ["correctness", "--kernel", "no_such_kernel"],
    ["time", "--kernel", "rmsnorm"],
    ["control", "--kernel", "rmsnorm", "--control", "no_such_control", "--layout", "t32", "--settings", "{}",
     "--output", "/nonexistent/x.json"],
])
def test_bad_input_gets_the_same_sentence_and_exit_code_as_without_the_pool(argv, pool_env):
    pooled = _kit(argv, pool_env)
    alone = _kit(argv, {**pool_env, "KERNELKIT_WORKER": "0"})
    assert pooled.returncode == alone.returncode == 2
    assert pooled.stderr == alone.stderr
    assert pooled.stderr.count("\n") == 1 and "Traceback" not in pooled.stderr


def test_the_pool_ends_when_idle_and_a_later_job_starts_another(tmp_path, pool_env):
    argv, _ = _skipped_timing(tmp_path, "a")
    assert _kit(argv, pool_env).returncode == 0
    address = _address(pool_env)
    assert _listening(address)
    deadline = time.monotonic() + 30
    while _listening(address) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _listening(address), "the pool outlived its idle_exit_s"
    argv, output = _skipped_timing(tmp_path, "b")
    assert _kit(argv, pool_env).returncode == 0
    assert json.loads(output.read_text())["job"]["worker"]["job_number"] == 1


def test_pools_are_keyed_by_what_decides_the_gpu_the_lock_and_the_pool_size():
    base = {"PATH": "/usr/bin"}
    with pytest.MonkeyPatch.context() as patch:
        names = []
        for extra in ({}, {"CUDA_VISIBLE_DEVICES": "1"}, {"KERNELKIT_LOCK_DIR": "/elsewhere"},
                      {"SLURM_JOB_ID": "42"}, {worker.PROCESSES_VARIABLE: "8"}):
            patch.setattr(worker.os, "environ", {**base, **extra})
            names.append(worker.pool_address())
        patch.setattr(worker.os, "environ", {**base, worker.IDLE_VARIABLE: "5"})
        unkeyed = worker.pool_address()
    assert len(set(names)) == len(names)
    assert unkeyed == names[0]


@pytest.mark.parametrize("cores, processes", [(1, 1), (3, 3), (4, 4), (16, 4), (128, 4), (0, 1)])
def test_a_pool_the_config_gives_no_size_has_the_runs_cores_up_to_four_processes(cores, processes):
    assert worker.default_processes(cores) == processes


def test_every_check_one_rmsnorm_timing_target_needs_can_start_at_once_with_the_default_pool():
    """What kernelkit.cards.pool_job_bound is for: the one-target build the README times (rmsnorm)
    has its correctness job, its negative controls and its sanitizer job run by the card's pool,
    and none of them waits behind the bound for a Snakemake scheduling round."""
    from kernelkit import cards, spec

    checks = 1 + len(spec.load("rmsnorm").mutations) + 1
    assert checks <= cards.pool_job_bound(worker.default_processes(16))


def test_each_repeat_beyond_the_first_has_a_pool_of_its_own():
    """Repeats are processes of their own (the diff resamples them as such): repeat 1 shares the
    checks' pool, every later repeat of a timing or span has its own, whatever the argument spelling."""
    checks = worker.pool_address(["correctness", "--kernel", "rmsnorm"])
    first = worker.pool_address(["time", "--kernel", "rmsnorm", "--repeat", "1"])
    second = worker.pool_address(["time", "--kernel", "rmsnorm", "--repeat", "2", "--order-key", "3"])
    assert checks == first == worker.pool_address() and second != first
    assert worker.pool_address(["span", "--repeat=2"]) == second == worker.pool_address(["time", "--repeat", "2"])
    assert worker.pool_address(["time", "--repeat", "3"]) not in (first, second)
    assert worker.repeat_of(["time", "--repeat", "x"]) is None and worker.repeat_of(["report", "--repeat", "2"]) is None


def test_the_sanitizer_children_run_in_their_own_process():
    from kernelkit import standby

    assert standby.child_environment()[worker.WORKER_VARIABLE] == "0"


def test_only_the_set_up_heavy_stages_are_delegated(monkeypatch):
    """The GPU stages that run many short jobs, the sanitizer's job (it only starts its children,
    which run under the tool as processes of their own), and the report's stages (imports are
    most of their time); never a command that runs under a tool itself, nor the once-per-run ones."""
    monkeypatch.setenv(worker.WORKER_VARIABLE, "1")
    assert [command for command in ("time", "span", "correctness", "control", "sanitize", "profile", "profile-call",
                                    "ceiling", "environment", "summary", "figure", "clock-figure", "report", "diff")
            if worker.enabled(command)] == ["time", "span", "correctness", "control", "sanitize", "summary", "figure",
                                            "clock-figure", "report"]
    monkeypatch.setenv(worker.WORKER_VARIABLE, "0")
    assert not worker.enabled("time")


def test_kept_inputs_are_the_same_arrays_read_only_and_bounded(tmp_path):
    import shutil

    import numpy as np

    from kernelkit import inputs, spec as specs

    kept = inputs.KeptInputs(limit_bytes=3 * 512 * 128 * 4)
    rmsnorm = specs.load("rmsnorm")
    first = kept.get(rmsnorm, "512x128")
    assert kept.get(rmsnorm, "512x128") is first
    fresh = inputs._made_inputs(rmsnorm, "512x128")
    assert first.keys() == fresh.keys() and all(np.array_equal(first[k], fresh[k]) for k in fresh)
    assert not any(array.flags.writeable for array in first.values())
    with pytest.raises(ValueError):
        first["x"][0, 0] = 1.0
    kept.get(rmsnorm, "4x128")
    kept.get(rmsnorm, "1024x128")  # over the limit with the first: the least recently used goes
    assert kept.bytes() <= kept.limit_bytes
    assert kept.get(rmsnorm, "512x128") is not first
    # An edited spec.py makes its own arrays.
    copy = tmp_path / "kernels"
    shutil.copytree(REPO / "kernels" / "rmsnorm", copy / "rmsnorm")
    edited = specs.load("rmsnorm", copy)
    before = kept.get(edited, "4x128")
    (copy / "rmsnorm" / "spec.py").write_text((copy / "rmsnorm" / "spec.py").read_text() + "\n# edited\n")
    assert kept.get(specs.load("rmsnorm", copy), "4x128") is not before


def _workers_by_card(run):
    """{gpu uuid: {worker pid: job numbers}} over a committed run's records, and the stages whose
    records name no worker."""
    by_card, own_process = {}, set()
    for path in (REPO / "results" / run).rglob("*.json"):
        record = json.loads(path.read_text())
        if not isinstance(record, dict) or not isinstance(record.get("job"), dict):
            continue
        ran_in = record["job"].get("worker")
        stage = path.relative_to(REPO / "results" / run).parts[0]
        if ran_in is None:
            own_process.add(stage)
            continue
        by_card.setdefault(record.get("gpu_uuid"), {}).setdefault(ran_in["pid"], []).append(ran_in["job_number"])
    return by_card, own_process


@pytest.mark.parametrize("run, processes, cards", [("h200-s3", 1, 1), ("h200-p3", 8, 1), ("h200-cold1", 8, 1), ("h200-w2x2d", 8, 2)])
def test_committed_runs_ran_their_many_gpu_jobs_in_one_pool_per_card(run, processes, cards):
    """--cores 1 makes one worker process, all cores at most 8 per GPU; only the few stages that are
    not delegated (environment, ceilings) ran in processes of their own; each worker numbered its
    jobs 1, 2, 3, ... without a gap (no job of it went unrecorded or ran twice)."""
    by_card, own_process = _workers_by_card(run)
    assert len(by_card) == cards
    assert all(len(pids) == processes for pids in by_card.values())
    assert own_process <= {"environment.json", "ceilings", "gpus"}
    for pids in by_card.values():
        for numbers in pids.values():
            assert sorted(numbers) == list(range(1, len(numbers) + 1))


@pytest.mark.parametrize("run, jobs, processes", [("h200-s3", 261, 1), ("h200-p3", 261, 8), ("h200-w2x2d", 261, 16), ("h200-w2x2g", 261, 16), ("h200-f1", 0, 0)])
def test_the_report_says_how_many_jobs_ran_in_worker_processes(run, jobs, processes):
    """Counted from the committed records' job clocks; a run made before workers says nothing of them."""
    from kernelkit.records import run_time
    from kernelkit.report import quality
    from kernelkit.report.run import Run

    loaded = Run(REPO / "results" / run)
    text = quality.run_time_paragraphs(loaded)[0].text
    records = loaded.timings + loaded.cold + loaded.spans + loaded.correctness + loaded.controls + list(loaded.ceilings.values())
    timed = run_time(records)
    assert (timed["worker_jobs"], timed["worker_processes"]) == (jobs, processes)
    if jobs:
        assert f" {jobs} of the jobs ran in {processes} long-lived worker process" in text
    else:
        assert "worker" not in text
    # When timing began and the negative controls ended, from the same clocks.
    first_timing = min(r["job"]["started_unix_s"] for r in loaded.timings + loaded.cold) - timed["started_unix_s"]
    last_control = max(r["job"]["ended_unix_s"] for r in loaded.controls) - timed["started_unix_s"]
    assert 0 < first_timing and 0 < last_control < timed["wall_s"]
    assert (f"The first timed target started {first_timing:.1f} s and the last negative control ended "
            f"{last_control:.1f} s after the first job started") in text


def test_a_worker_whose_job_lost_its_own_process_ends_and_lets_the_gpu_go(tmp_path, pool_env):
    """Snakemake stopping a job kills the job's own process: the worker running it must not go on
    with it (and hold the GPU lock for a job nobody waits for). Here the job hangs loading its
    kernel folder, whose spec.py sleeps."""
    import shutil

    kernels = tmp_path / "kernels"
    shutil.copytree(REPO / "kernels" / "rmsnorm", kernels / "rmsnorm")
    spec = kernels / "rmsnorm" / "spec.py"
    spec.write_text(spec.read_text() + "\nimport time\n\ntime.sleep(120)\n")
    env = {**pool_env, "KERNELKIT_WORKER_PROCESSES": "1", "KERNELKIT_KERNELS": str(kernels)}
    client = subprocess.Popen([sys.executable, "-m", "kernelkit", "correctness", "--kernel", "rmsnorm"], env=env,
                              cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    address = _address(env)
    deadline = time.monotonic() + 30
    while not pool_pids(address[1:]) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.5)  # the worker has taken the job and sleeps in it
    assert _listening(address) and client.poll() is None
    client.kill()
    client.wait()
    deadline = time.monotonic() + 10
    while _listening(address) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _listening(address), "the worker went on with a job whose process was killed"
    assert not pool_pids(address[1:])


def test_a_long_worker_log_is_set_aside_when_the_next_pool_starts(tmp_path, pool_env):
    log = Path(pool_env["KERNELKIT_LOCK_DIR"]) / f"kernelkit-worker-{os.geteuid()}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    log.write_bytes(b"x" * (worker.LOG_KEEP_BYTES + 1))
    argv, _ = _skipped_timing(tmp_path, "logged")
    assert _kit(argv, pool_env).returncode == 0
    assert (log.parent / (log.name + ".1")).stat().st_size == worker.LOG_KEEP_BYTES + 1
    assert log.stat().st_size < 1000 and b"serving" in log.read_bytes()


def _start_pool(env):
    code = "from kernelkit.worker_client import start_pool; start_pool()"
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=30)


def _wait_until(condition, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_pool_started_before_its_jobs_serves_the_first_job_from_a_waiting_worker(tmp_path, pool_env):
    address = _address(pool_env)
    _start_pool(pool_env)
    assert _wait_until(lambda: _listening(address)), "start_pool started no pool"
    log = (Path(pool_env["KERNELKIT_LOCK_DIR"]) / f"kernelkit-worker-{os.geteuid()}.log").read_text()
    assert f"starts pool {address[1:]} before its jobs" in log
    time.sleep(1.0)  # the workers' imports
    argv, output = _skipped_timing(tmp_path, "first")
    done = _kit(argv, pool_env)
    assert done.returncode == 0, done.stderr
    job = json.loads(output.read_text())["job"]
    assert job["worker"]["job_number"] == 1
    # Begun and ready before the job's own process began: the pool did not wait for a job to start it.
    assert job["worker"]["pool_started_unix_s"] <= job["worker"]["started_unix_s"] < job["started_unix_s"]


def test_starting_a_pool_where_one_serves_leaves_that_one_alone(tmp_path, pool_env):
    address = _address(pool_env)
    _start_pool(pool_env)
    assert _wait_until(lambda: _listening(address) and len(pool_pids(address[1:])) == 2)
    first = sorted(pool_pids(address[1:]))
    _start_pool(pool_env)
    time.sleep(1.0)  # a second pool would have bound the name, or left, by now
    assert sorted(pool_pids(address[1:])) == first


def _answer_jobs(listeners, defer_s, name, ready):
    """A stand-in worker in a process of its own: answer each job on the shared sockets with its name."""
    from kernelkit.worker import next_job

    ready.put(name)
    while True:
        try:
            connection = next_job(listeners, 10.0, defer_s)
        except TimeoutError:
            return
        with connection:
            connection.sendall(name.encode())


def _ask(address):
    """One job: connect, and read which worker took it and how long that took."""
    began = time.monotonic()
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
        client.connect(address)
        client.settimeout(10)
        return client.recv(64).decode(), time.monotonic() - began


def test_an_idle_worker_that_used_the_gpu_takes_a_job_before_one_that_would_make_a_context():
    """Two processes wait on one shared socket, as a pool's do: the one that defers (no CUDA context
    yet) gets a job only when the other is gone, and then `defer_s` later."""
    address = f"\0kernelkit-test-{uuid.uuid4().hex}"
    listener = _shared_listener(address)
    forked = multiprocessing.get_context("fork")
    ready = forked.Queue()
    defer_s = 0.5
    used_gpu = forked.Process(target=_answer_jobs, args=([listener], 0.0, "used_gpu", ready), daemon=True)
    no_context = forked.Process(target=_answer_jobs, args=([listener], defer_s, "no_context", ready), daemon=True)
    try:
        for process in (no_context, used_gpu):
            process.start()
        assert {ready.get(timeout=30), ready.get(timeout=30)} == {"used_gpu", "no_context"}
        time.sleep(0.2)  # both wait in next_job
        answers = [_ask(address) for _ in range(5)]
        assert [name for name, _ in answers] == ["used_gpu"] * 5
        used_gpu.terminate()
        used_gpu.join(10)
        time.sleep(2 * defer_s)  # the other is back to waiting, not within a deferral begun by an earlier job
        name, waited_s = _ask(address)
        assert name == "no_context"
        assert waited_s >= defer_s
    finally:
        for process in (used_gpu, no_context):
            process.kill()
        listener.close()


@pytest.mark.parametrize("defer_s", [0.0, 0.02])
def test_a_worker_still_ends_after_its_idle_time(defer_s):
    from kernelkit.worker import next_job

    with _shared_listener(f"\0kernelkit-test-{uuid.uuid4().hex}") as listener:
        began = time.monotonic()
        with pytest.raises(TimeoutError):
            next_job([listener], 0.3, defer_s)
        assert 0.3 <= time.monotonic() - began < 5


def _shared_listener(address):
    """A listening socket as pool_main makes each of a pool's: non-blocking, shared by its processes."""
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(address)
    listener.listen(8)
    listener.setblocking(False)
    return listener


def _connected(address):
    client = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    client.connect(address)
    return client


def test_a_job_at_the_first_served_socket_is_taken_before_jobs_that_came_earlier():
    """kernelkit.worker.next_job with the pool's two sockets: the first-served one's job goes first,
    then the others in the order they came."""
    from kernelkit.worker import next_job

    address = f"\0kernelkit-test-{uuid.uuid4().hex}"
    first_address = worker.first_served_address(address)
    with _shared_listener(first_address) as first, _shared_listener(address) as other:
        clients = [_connected(address), _connected(address), _connected(first_address)]
        for number, client in enumerate(clients):
            client.sendall(bytes([number]))
        try:
            taken = []
            for _ in clients:
                with next_job([first, other], 5.0, 0.0) as connection:
                    connection.setblocking(True)
                    taken.append(connection.recv(1)[0])
            assert taken == [2, 0, 1]
            with pytest.raises(TimeoutError):
                next_job([first, other], 0.2, 0.0)
        finally:
            for client in clients:
                client.close()


def test_the_checks_the_workflow_names_are_served_first():
    marks = {worker.FIRST_SERVED_VARIABLE: worker.first_served_checks([("rmsnorm", "barrier")])}
    assert worker.served_first(["sanitize", "--kernel", "rmsnorm", "--layout", "t32"], marks)
    assert worker.served_first(["control", "--kernel", "rmsnorm", "--control", "barrier", "--layout", "t32"], marks)
    assert worker.served_first(["control", "--kernel=rmsnorm", "--control=barrier"], marks)
    assert not worker.served_first(["control", "--kernel", "rmsnorm", "--control", "epsilon"], marks)
    assert not worker.served_first(["control", "--kernel", "layernorm", "--control", "barrier"], marks)
    assert not worker.served_first(["correctness", "--kernel", "rmsnorm", "--layout", "t32"], marks)
    assert not worker.served_first(["time", "--kernel", "rmsnorm", "--repeat", "1"], marks)
    assert not worker.served_first(["sanitize", "--kernel", "rmsnorm"], {})
    assert not worker.served_first([], marks)


def test_a_check_served_first_connects_to_its_pools_second_socket(pool_env):
    """Here a stand-in pool listens on that socket only; it answers the job as a worker does."""
    address = _address(pool_env)
    with _shared_listener(worker.first_served_address(address)) as listener:
        listener.setblocking(True)
        listener.settimeout(60)
        env = {**pool_env, worker.FIRST_SERVED_VARIABLE: worker.first_served_checks([("rmsnorm", "barrier")])}
        job = subprocess.Popen([sys.executable, "-m", "kernelkit", "control", "--kernel", "rmsnorm", "--control", "barrier"],
                               env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            connection, _ = listener.accept()
            with connection, connection.makefile("rb") as requests:
                request = worker.read_line(requests)
                connection.sendall(b'{"pid": 1}\n' + json.dumps({"rc": 0, "stdout": "served\n", "stderr": ""}).encode() + b"\n")
            out, _ = job.communicate(timeout=60)
        finally:
            job.kill()
    assert request["argv"][:5] == ["control", "--kernel", "rmsnorm", "--control", "barrier"]
    assert (job.returncode, out) == (0, "served\n")


def test_a_pool_listens_on_both_its_sockets(tmp_path, pool_env):
    address = _address(pool_env)
    argv, _ = _skipped_timing(tmp_path, "both")
    assert _kit(argv, pool_env).returncode == 0
    assert _listening(address) and _listening(worker.first_served_address(address))


def test_the_first_served_checks_name_the_same_pool(monkeypatch):
    monkeypatch.delenv(worker.FIRST_SERVED_VARIABLE, raising=False)
    unmarked = worker.pool_address()
    monkeypatch.setenv(worker.FIRST_SERVED_VARIABLE, worker.first_served_checks([("rmsnorm", "barrier")]))
    assert worker.pool_address() == unmarked


def test_contexts_ahead_travel_as_pool_options():
    for other_context in (True, False):
        again = worker.ContextsAhead.from_options(["ignored", *worker.ContextsAhead(other_context).options()])
        assert again.other_context is other_context
    assert worker.ContextsAhead.from_options([]) is None
    assert worker.ContextsAhead.from_options(["contexts-ahead=x"]) is None


def test_a_pool_is_kept_for_each_noted_workflow_while_it_runs_and_not_for_a_process_reusing_its_pid(pool_env):
    address = _repeat_pool_address(pool_env, 2)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELKIT_LOCK_DIR", pool_env["KERNELKIT_LOCK_DIR"])
        first = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        second = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
        try:
            assert not worker.kept_for_workflow(address)
            worker.keep_for_workflow(address, first.pid)
            worker.keep_for_workflow(address, second.pid)
            assert worker.kept_for_workflow(address)
            _end(first)
            assert worker.kept_for_workflow(address)  # the second still runs
            note = next(Path(pool_env["KERNELKIT_LOCK_DIR"]).glob("*.workflows"))
            pid, ticks = map(int, note.read_text().splitlines()[-1].split())
            assert pid == second.pid
            note.write_text(f"{second.pid} {ticks + 1}\n")  # the same pid, started at another time
            assert not worker.kept_for_workflow(address)
        finally:
            first.kill()
            second.kill()


def _repeat_pool_address(env, repeat):
    code = f"from kernelkit.worker_client import pool_address; print(repr(pool_address(['time', '--repeat', '{repeat}'])))"
    return eval(subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,  # noqa: S307
                               check=True).stdout)


@contextlib.contextmanager
def _pool_started_ahead(env, repeat):
    """The pool of `repeat`, started ahead of its jobs for a stand-in workflow process, as the
    workflow's onstart does (start_repeat_pools); yields its address and the stand-in."""
    address = _repeat_pool_address(env, repeat)
    workflow_stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    try:
        start = f"from kernelkit.worker_client import start_repeat_pools; start_repeat_pools({workflow_stand_in.pid}, [{repeat}], False)"
        subprocess.run([sys.executable, "-c", start], env=env, check=True, timeout=30)
        assert _wait_until(lambda: _listening(address)), "start_repeat_pools started no pool"
        yield address, workflow_stand_in
    finally:
        workflow_stand_in.kill()
        for pid in pool_pids(address[1:]):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)


def _end(process):
    process.kill()
    process.wait()


def test_a_repeat_pool_started_ahead_waits_for_jobs_while_the_workflow_runs(tmp_path, pool_env):
    """Started for a workflow process (a stand-in here), the pool of repeat 2 outlives its idle
    time before and after its first job, which it serves, and leaves once the workflow has ended.
    On a machine without a GPU its processes make no context."""
    env = {**pool_env, "KERNELKIT_WORKER_IDLE_S": "1"}
    with _pool_started_ahead(env, 2) as (address, workflow_stand_in):
        time.sleep(4.0)  # four times the idle time
        assert _listening(address), "a pool started ahead left before its first job while its workflow ran"
        argv, output = _skipped_timing(tmp_path, "rep2")
        argv[argv.index("--repeat") + 1] = "2"
        done = _kit(argv, env)
        assert done.returncode == 0, done.stderr
        job = json.loads(output.read_text())["job"]
        assert job["worker"]["job_number"] == 1
        assert job["worker"]["pool_started_unix_s"] < job["started_unix_s"] - 4.0
        time.sleep(3.0)
        assert _listening(address), "after its first job the pool left while its workflow ran"
        _end(workflow_stand_in)
        assert _wait_until(lambda: not _listening(address), timeout_s=15), "the pool outlived its workflow and idle time"
        log = (Path(env["KERNELKIT_LOCK_DIR"]) / f"kernelkit-worker-{os.geteuid()}.log").read_text()
        assert f"kernelkit workflow {workflow_stand_in.pid} starts pool {address[1:]} before its jobs, contexts made ahead" in log


def test_a_repeat_pool_started_ahead_leaves_after_its_workflow_ends_without_a_job(pool_env):
    env = {**pool_env, "KERNELKIT_WORKER_IDLE_S": "1"}
    with _pool_started_ahead(env, 3) as (address, workflow_stand_in):
        time.sleep(3.0)
        assert _listening(address)
        _end(workflow_stand_in)
        assert _wait_until(lambda: not _listening(address), timeout_s=15), "the pool outlived its workflow and idle time"
