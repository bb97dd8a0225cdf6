# The first card's worker pool, begun before the config and the rest of the workflow are read
# (kernelkit.worker_client.UnnamedPool says why); common.smk names it or sends it away. Apart, and
# first, because Snakemake reads a rule file whole before it runs any of it, and common.smk and
# the kit it imports take 0.2-0.4 s.
import contextlib
import functools
import io
import os
import sys

# The workflow reads its config with this checkout's kit; jobs run `python -m kernelkit`
# from the environment the README's install command set up (`pip install -e .`).
sys.path.insert(0, os.path.join(workflow.basedir, "workflow"))

from kernelkit.worker_client import WORKER_VARIABLE, UnnamedPool  # the standard library's only


# Options after which Snakemake runs no job: they get no GPU check.
NO_JOB_OPTIONS = ("dryrun", "lint", "list_rules", "list_target_rules", "unlock", "report", "dag",
                  "rulegraph", "filegraph", "d3dag", "summary", "detailed_summary", "touch",
                  "cleanup_metadata", "cleanup_shadow", "list_changes", "list_input_changes",
                  "list_params_changes", "list_untracked", "list_conda_envs", "conda_create_envs_only",
                  "conda_cleanup_envs", "containerize", "generate_unit_tests", "print_compilation",
                  "export_cwl", "delete_all_output", "delete_temp_output", "archive")


@functools.lru_cache(maxsize=None)
def command_line():
    """The targets of the `snakemake` command that reads this Snakefile and whether it runs jobs
    on this machine, or (None, None) where there is no command to read (a job's own process,
    Snakemake run as a library). Snakemake hands neither to the Snakefile while it is read, so
    the command line is parsed again by Snakemake's own parser, profiles included (the SLURM
    profile names its executor there), with the parser's messages silenced: Snakemake's own
    parse of the same line has printed them already."""
    if not workflow.is_main_process or os.path.basename(sys.argv[0]) != "snakemake":
        return None, None
    from snakemake.cli import parse_args

    try:
        with contextlib.redirect_stderr(io.StringIO()), contextlib.redirect_stdout(io.StringIO()):
            _, args = parse_args(sys.argv[1:])
    except (Exception, SystemExit):
        return None, None
    local = getattr(args, "executor", None) in (None, "local")
    runs_jobs = local and not any(getattr(args, name, None) for name in NO_JOB_OPTIONS)
    return tuple(args.targets or []), runs_jobs


def jobs_use_this_python():
    """Whether the jobs run in this process's Python, not in a conda environment of their own."""
    from snakemake.settings.types import DeploymentMethod

    return DeploymentMethod.CONDA not in workflow.deployment_settings.deployment_method


def begin_unnamed_pool():
    """The first card's checks' pool, begun before the config is read (kernelkit.worker_client.UnnamedPool
    says why), for a command that runs jobs on this machine in this Python, unless the environment
    turns pools off. Importing, it touches no GPU; it is named, or sent away, once the config is
    validated (start_worker_pools)."""
    _, runs_jobs = command_line()
    if not runs_jobs or not jobs_use_this_python() or os.environ.get(WORKER_VARIABLE, "1") != "1":
        return None
    return UnnamedPool.begin()


UNNAMED_POOL = begin_unnamed_pool()
