"""squeue/sacct parsing on recorded outputs of Slurm 20.11 to 24.11 (no Slurm needed).

orch asks ``squeue -h --states=all -j IDS -o '%i|%j|%T'`` and, for jobs slurmctld forgot,
``sacct -X -n -P -j IDS -o JobIDRaw,JobName,State``. Each recording below says where it comes
from. Recordings quoted from a public report are rewritten into orch's three fields where the
report asked for other fields; the state words, job ids and line structure (steps, array
tasks, error lines, truncation) are the report's own.
"""

from __future__ import annotations

import pytest

from orchestrator.backends.slurm import SLURM_STATES, parse_jobs, slurm_state
from orchestrator.backends.slurm import scheduler as slurm
from orchestrator.runs.rundir import JobRecord

# --- recordings ------------------------------------------------------------------------------

# Slurm 22.05.8 (Debian 12 slurm-wlm), the test cluster, recorded 2026-11-23 with orch's own
# sacct command (no -X here, to keep the step lines): a failed job, a job cancelled by root
# (uid 0: sacct writes "CANCELLED by 0" for the job, plain "CANCELLED" for its steps), a timeout.
SACCT_22_05_TESTCLUSTER = """\
8|torch-ddp-lenet5-ib-n2-r0-6ab0d6eb|FAILED
8.batch|batch|FAILED
8.0|bash|FAILED
9|torch-ddp-lenet5-ib-n2-r0-0cd171fb|CANCELLED by 0
9.batch|batch|CANCELLED
9.0|bash|CANCELLED
51|torch-ddp-lenet5-ib-n1-r0-b133dcc9|TIMEOUT
"""

# Slurm 22.05.8, the test cluster: squeue of finished jobs slurmctld still remembers, and an id
# it does not know (squeue exits 1 and prints the error; orch reads stdout only, the error line
# is shown here as if merged, which must not confuse the parser either).
SQUEUE_22_05_TESTCLUSTER = """\
74|torch-ddp-lenet5-ib-n1-r0-0563a272|COMPLETED
77|torch-ddp-lenet5-ib-n2-r0-a9adcc81|COMPLETED
slurm_load_jobs error: Invalid job id specified
"""

# snakemake-executor-plugin-slurm issue #157 (2024-10): the output of
# `sacct -X --parsable2 --noheader --format=JobIdRaw,State ...`, with a job name column added.
SACCT_SNAKEMAKE_157 = """\
8183088|e985391f|FAILED
8183089|e985391f|COMPLETED
8183090|e985391f|FAILED
8183091|e985391f|COMPLETED
"""

# martius-lab/cluster_utils issue #87 (2024-04): `sacct --parsable2` without -X lists the
# steps: the job COMPLETED while its srun step 239023.0 was CANCELLED.
SACCT_CLUSTER_UTILS_87 = """\
239023|job|COMPLETED
239023.batch|batch|COMPLETED
239023.extern|extern|COMPLETED
239023.0|python|CANCELLED
"""

# burrmill/burrmill issue #15 (2020-10, Slurm 20.x): squeue of a job array whose tasks went
# back to PENDING ("launch failed requeued held"); array tasks are shown as <job>_<task>.
SQUEUE_BURRMILL_15 = """\
80520_36|get_phone_alignments.sh|PENDING
80520_56|get_phone_alignments.sh|PENDING
"""

# BSC-ES/autosubmit issue #382 (2019) and UF Research Computing's job-state page: sacct
# without --parsable cuts the state to 10 characters: "OUT_OF_ME+"; lanl/BEE issue #889
# (2024): "CANCELLED+" ("CANCELLED by <uid>" cut). orch asks -P, but a site's SACCT_FORMAT
# or wrapper may not.
SACCT_TRUNCATED = """\
1488666|a1ql_2012+|OUT_OF_ME+
1488666.bat+|batch|OUT_OF_ME+
15926486|cat-5793969dbb+|CANCELLED+
"""

# MFlowCode/MFC PR #1311 (2026-03): after a preemption with requeue, `sacct -X` still reports
# PREEMPTED for the job's first attempt; squeue (asked first by orch) shows the requeued
# job. reframe-hpc/reframe issue #3703 (2026-08): a job squeue reports as REQUEUED.
SACCT_MFC_1311 = "4711|mfc-test|PREEMPTED\n"
SQUEUE_REFRAME_3703 = "4712|rfm_job|REQUEUED\n"

# The remaining terminal states, as the squeue/sacct man pages of Slurm 20.11.9 (pkgsrc
# slurm-wlm-20.11.9), 21.08.5 (Ubuntu 22.04), 22.05.8 (Ubuntu 23.04), 23.11.4 (Ubuntu 24.04)
# and SchedMD's job_state_codes page (24.11) name them, in orch's sacct layout:
SACCT_MAN_PAGE_STATES = """\
100|r-node-fail|NODE_FAIL
101|r-boot-fail|BOOT_FAIL
102|r-oom|OUT_OF_MEMORY
103|r-deadline|DEADLINE
104|r-preempted|PREEMPTED
105|r-special|SPECIAL_EXIT
106|r-revoked|REVOKED
107|r-stopped|STOPPED
"""


# --- tests -----------------------------------------------------------------------------------

def test_testcluster_sacct_keeps_jobs_and_drops_steps():
    seen = parse_jobs(SACCT_22_05_TESTCLUSTER)
    assert set(seen) == {"8", "9", "51"}
    assert seen["9"][:2] == ("torch-ddp-lenet5-ib-n2-r0-0cd171fb", "CANCELLED by 0")
    assert slurm_state(seen["8"][1]) == ("FAILED", "Slurm state FAILED")
    assert slurm_state(seen["9"][1]) == ("CANCELLED", "Slurm state CANCELLED by 0")
    assert slurm_state(seen["51"][1]) == ("TIMEOUT", "")


def test_testcluster_squeue_ignores_error_lines():
    seen = parse_jobs(SQUEUE_22_05_TESTCLUSTER)
    assert set(seen) == {"74", "77"}
    assert all(slurm_state(job.state) == ("COMPLETED", "") for job in seen.values())


def test_snakemake_sacct_parsable():
    seen = parse_jobs(SACCT_SNAKEMAKE_157)
    assert [slurm_state(job.state)[0] for job in seen.values()] == [
        "FAILED", "COMPLETED", "FAILED", "COMPLETED"]


def test_a_cancelled_step_does_not_change_the_job():
    assert parse_jobs(SACCT_CLUSTER_UTILS_87) == {"239023": ("job", "COMPLETED", "")}


def test_array_tasks_are_their_own_jobs():
    seen = parse_jobs(SQUEUE_BURRMILL_15)
    assert set(seen) == {"80520_36", "80520_56"}
    assert slurm_state(seen["80520_36"][1]) == ("PENDING", "")


def test_truncated_state_words():
    seen = parse_jobs(SACCT_TRUNCATED)
    assert set(seen) == {"1488666", "15926486"}
    assert slurm_state(seen["1488666"][1]) == ("OUT_OF_MEMORY", "Slurm state OUT_OF_MEMORY")
    assert slurm_state(seen["15926486"][1]) == ("CANCELLED", "Slurm state CANCELLED")


def test_preempted_and_requeued():
    assert slurm_state(parse_jobs(SACCT_MFC_1311)["4711"][1]) == ("PREEMPTED", "")
    assert slurm_state(parse_jobs(SQUEUE_REFRAME_3703)["4712"][1]) == ("PENDING", "")


@pytest.mark.parametrize("job_id,state,reason", [
    ("100", "NODE_FAIL", ""),
    ("101", "BOOT_FAIL", ""),
    ("102", "OUT_OF_MEMORY", ""),
    ("103", "TIMEOUT", "Slurm state DEADLINE"),
    ("104", "PREEMPTED", ""),
    ("105", "FAILED", "Slurm state SPECIAL_EXIT"),
    ("106", "CANCELLED", "Slurm state REVOKED"),
    ("107", "RUNNING", "Slurm state STOPPED"),  # held still: the hang watch pauses
])
def test_man_page_states(job_id, state, reason):
    assert slurm_state(parse_jobs(SACCT_MAN_PAGE_STATES)[job_id][1]) == (state, reason)


def test_unknown_and_ambiguous_words_are_failures_with_the_word():
    assert slurm_state("LAUNCH_FAILED_SOMETHING") == (
        "FAILED", "Slurm state LAUNCH_FAILED_SOMETHING")
    assert slurm_state("RE+") == ("FAILED", "Slurm state RE+")  # REQUEUED? RESIZING? ...
    assert slurm_state("") == ("FAILED", "Slurm state (empty)")


def test_the_table_maps_every_word_to_an_orch_state():
    from orchestrator.runs.rundir import STATES

    assert set(SLURM_STATES.values()) == set(STATES) - {"NEW", "HUNG"}
    for word in ("REQUEUED", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL",
                 "DEADLINE"):
        assert word in SLURM_STATES


def test_poll_uses_squeue_then_sacct(monkeypatch):
    """poll() on recordings: squeue knows 74, sacct knows 9 and 51; 60 is new."""
    calls = []

    def fake_squeue(ids):
        calls.append("squeue")
        return slurm.parse_jobs(SQUEUE_22_05_TESTCLUSTER)

    def fake_sacct(args):
        calls.append("sacct")
        return SACCT_22_05_TESTCLUSTER

    monkeypatch.setattr(slurm, "_squeue", fake_squeue)
    monkeypatch.setattr(slurm, "sacct", fake_sacct)
    recs = [JobRecord(run_id=name, scheduler="slurm", job_id=jid, state="PENDING")
            for name, jid in [("torch-ddp-lenet5-ib-n1-r0-0563a272", "74"),
                              ("torch-ddp-lenet5-ib-n2-r0-0cd171fb", "9"),
                              ("torch-ddp-lenet5-ib-n1-r0-b133dcc9", "51"),
                              ("someone-elses-run", "8"), ("fresh", "60")]]
    out = slurm.SlurmScheduler().poll(recs, [None] * len(recs))
    assert calls == ["squeue", "sacct"]
    assert out["torch-ddp-lenet5-ib-n1-r0-0563a272"] == ("COMPLETED", "")
    assert out["torch-ddp-lenet5-ib-n2-r0-0cd171fb"] == (
        "CANCELLED", "Slurm state CANCELLED by 0")
    assert out["torch-ddp-lenet5-ib-n1-r0-b133dcc9"] == ("TIMEOUT", "")
    assert out["someone-elses-run"][0] == "FAILED"  # id 8 now belongs to another job
    assert out["fresh"] == ("PENDING", "")
