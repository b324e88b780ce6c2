"""scripts/gpu-check.sh's verdicts, from fake ctest/pytest logs (no GPU needed).

The GPU machine is lent for one call: a wrong verdict there costs the whole check, so the
verdict logic (scripts/gpu-check-verdict.sh) is tested here, in CI.
"""

import os
import subprocess

import pytest

from tt_testutil import ROOT

VERDICT = os.path.join(ROOT, "scripts", "gpu-check-verdict.sh")

CTEST_PASSED = """\
Test project /x/build-gpu
    Start 1: cupti_gpu_test
    Start 2: patch_device_test
1/2 Test #2: patch_device_test ................   Passed    3.12 sec
2/2 Test #1: cupti_gpu_test ...................   Passed    1.02 sec

100% tests passed, 0 tests failed out of 2

Label Time Summary:
gpu    =   4.14 sec*proc (2 tests)
"""

# What ctest printed when every patch test was its own ctest test: a passing test whose
# name holds "Skipped".
CTEST_PASSED_NAME_SAYS_SKIPPED = """\
Test project /x/build-gpu
 64/165 Test  #64: PatchDeviceTest.SkippedEntryIsCountedWithItsError ......   Passed    0.41 sec
165/165 Test #165: PatchDeviceTest.ZeroFill ...............................   Passed    0.40 sec

100% tests passed, 0 tests failed out of 165
"""

CTEST_SKIPPED = """\
Test project /x/build-gpu
1/2 Test #2: patch_device_test ................***Skipped   0.02 sec
2/2 Test #1: cupti_gpu_test ...................   Passed    1.02 sec

100% tests passed, 0 tests failed out of 2

The following tests did not run:
\t  2 - patch_device_test (Skipped)
"""

CTEST_FAILED = """\
1/1 Test #1: cupti_gpu_test ...................***Failed    1.02 sec

0% tests passed, 1 tests failed out of 1
"""

PYTEST_PASSED = """\
tests/python/test_gpu.py::test_kernels_recorded_per_call PASSED          [ 50%]
tests/python/test_gpu.py::test_skipped_entry_reported PASSED             [100%]

============================== 2 passed in 9.71s ===============================
"""

PYTEST_SKIPPED = """\
tests/python/test_gpu.py::test_kernels_recorded_per_call PASSED          [ 50%]
tests/python/test_gpu.py::test_graph_replay SKIPPED (needs a CUDA device) [100%]

========================= 1 passed, 1 skipped in 9.71s =========================
"""


def verdict(tmp_path, name, rc, log, limit=90):
    path = tmp_path / "step.log"
    path.write_text(log)
    r = subprocess.run(["bash", str(VERDICT), name, str(rc), str(limit), str(path)],
                       capture_output=True, text=True, timeout=30)
    return r.stdout.strip(), r.returncode


@pytest.mark.parametrize("name, log", [
    ("ctest-gpu", CTEST_PASSED),
    ("ctest-gpu", CTEST_PASSED_NAME_SAYS_SKIPPED),
    ("pytest-gpu", PYTEST_PASSED),
    ("demo", PYTEST_SKIPPED),  # not a gpu step: a skip there is not a verdict
])
def test_passing_steps_pass(tmp_path, name, log):
    assert verdict(tmp_path, name, 0, log) == ("pass", 0)


@pytest.mark.parametrize("log", [CTEST_SKIPPED, PYTEST_SKIPPED])
def test_a_skipped_gpu_test_fails_the_step(tmp_path, log):
    assert verdict(tmp_path, "gpu-tests", 0, log) == ("SKIPPED TESTS (no GPU seen?)", 3)


def test_failures_and_timeouts_keep_their_status(tmp_path):
    assert verdict(tmp_path, "ctest-gpu", 8, CTEST_FAILED) == ("FAIL (rc 8)", 8)
    assert verdict(tmp_path, "ctest-gpu", 124, CTEST_PASSED, limit=45) == (
        "TIMEOUT after 45 s", 124)


def test_summary_line_is_the_count_not_a_test_name(tmp_path):
    path = tmp_path / "step.log"
    for log, want in [(CTEST_PASSED_NAME_SAYS_SKIPPED,
                       "100% tests passed, 0 tests failed out of 165"),
                      (PYTEST_SKIPPED, "1 passed, 1 skipped in 9.71s")]:
        path.write_text(log)
        r = subprocess.run(["bash", "-c", f'source "{VERDICT}"; step_summary_line "{path}"'],
                           capture_output=True, text=True, timeout=30)
        assert want in r.stdout, r.stdout


PYTEST_ANSWERS = """\
tests/python/test_gpu.py::test_seed_example_on_cuda_with_kernels PASSED  [ 10%]
tests/python/test_gpu.py::test_declarative_edit_on_cuda_matches_hook[dtype0] PASSED [ 20%]
tests/python/test_gpu.py::test_declarative_edit_on_cuda_matches_hook[dtype1] FAILED [ 30%]
tests/python/test_gpu_graphs.py::test_replayed_kernels_keep_their_modules_and_count_as_tokens SKIPPED (x) [ 40%]
tests/python/test_gpu_graphs.py::test_seed_example_on_cuda_with_kernels_too PASSED [ 50%]
"""


@pytest.mark.parametrize("test, answer", [
    ("test_gpu.py::test_seed_example_on_cuda_with_kernels", "yes"),
    ("test_gpu.py::test_declarative_edit_on_cuda_matches_hook", "NO (failed)"),  # one of two
    ("test_gpu_graphs.py::test_replayed_kernels_keep_their_modules_and_count_as_tokens",
     "NO (skipped)"),
    ("test_gpu_graphs.py::test_generate_with_static_cache_traces_every_token", "not run"),
])
def test_answers_come_from_the_named_test_only(tmp_path, test, answer):
    path = tmp_path / "pytest.log"
    path.write_text(PYTEST_ANSWERS)
    r = subprocess.run(["bash", "-c", f'source "{VERDICT}"; test_answer "{path}" "{test}"'],
                       capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == answer


def test_gpu_ctest_step_is_a_few_processes():
    """Each `gpu` ctest test is a whole binary: one process and one CUDA context each, so the
    step fits the check's time (165 patch tests in their own processes did not)."""
    build = os.environ.get("BUILD_DIR", os.path.join(ROOT, "build"))
    if not os.path.exists(os.path.join(build, "CTestTestfile.cmake")):
        pytest.skip(f"no configured build in {build}")
    r = subprocess.run(["ctest", "-N", "-L", "gpu"], cwd=build, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    names = [line.split(":", 1)[1].strip() for line in r.stdout.splitlines()
             if line.strip().startswith("Test") and "#" in line]
    assert names, r.stdout
    assert len(names) <= 4, names


NCCL_LOG = """\
tests/python/test_gpu_nccl.py::test_one_rank_nccl_kernels_are_communication PASSED [ 50%]
tests/python/test_gpu_nccl.py::test_two_ranks_nccl_kernels_are_the_gpu_comm_column SKIPPED (needs 2 GPUs) [100%]
"""


@pytest.mark.parametrize("log, have, answer", [
    (NCCL_LOG, 1, "not checked: 1 GPU(s), needs 2"),  # the one-H200 machine: fails nothing
    (NCCL_LOG, 2, "NO (skipped)"),  # 2 GPUs there and still skipped: a failure
    (NCCL_LOG.replace("SKIPPED (needs 2 GPUs)", "PASSED"), 1, "yes"),
    (NCCL_LOG.replace("SKIPPED (needs 2 GPUs)", "FAILED"), 2, "NO (failed)"),
])
def test_a_test_needing_more_gpus_than_there_are_is_not_checked(tmp_path, log, have, answer):
    path = tmp_path / "nccl.log"
    path.write_text(log)
    test = "test_gpu_nccl.py::test_two_ranks_nccl_kernels_are_the_gpu_comm_column"
    r = subprocess.run(["bash", "-c", f'source "{VERDICT}"; device_answer "{path}" "{test}" 2 {have}'],
                       capture_output=True, text=True, timeout=30)
    assert r.stdout.strip() == answer, r.stdout + r.stderr

