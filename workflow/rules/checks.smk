# The checks of one kernel, each stage one process for all its layouts or controls, gate every
# timing of the kernel (kernelkit.cases.require_checked). One rule body serves the three stages;
# each keeps its own name, shell text and params, which Snakemake compares to decide what to rerun.
# The shell text names no loop variable: Snakemake evaluates it again when the job runs, after the
# loop has moved on, so what differs per stage travels in params.
import shlex

CHECK_SETTINGS = CheckSettings.json_from_config(config)
for kernel in KERNELS:
    for rule_name, command, files, log_file, layouts in (
        ("correctness", "correctness", PLAN.correctness_files(kernel), paths.log(paths.CORRECTNESS), LAYOUTS[kernel]),
        ("negative_controls", "control", PLAN.control_files(kernel), paths.log(paths.CONTROL),
         PLAN.control_layouts(kernel)),
        ("sanitize", "sanitize", PLAN.sanitizer_files(kernel), paths.log(paths.SANITIZER), PLAN.hand_written(kernel)),
    ):
        if not files:
            continue
        writes = (["--output", *files] if command == "sanitize" else
                  ["--settings", CHECK_SETTINGS, "--output-dir", os.path.dirname(files[0])])

        rule:
            name:
                f"{rule_name}_{kernel}"
            input:
                kernel_sources(kernel),
            output:
                files,
            log:
                paths.path(log_file, run=RUN, kernel=kernel, layout="all", control="all"),
            priority: CHECK_PRIORITY + 1 + CHECK_RANK[kernel]
            conda:
                "../../envs/kernelkit.yaml"
            resources:
                gpu=1,
                **card_resources(kernel),
            params:
                pin=pin(kernel),
                command=command,
                layouts=" ".join(f"--layout {name}" for name in layouts),
                writes=shlex.join(writes),
                kernel=kernel,
            shell:
                "{params.pin}python -m kernelkit {params.command} --kernel {params.kernel} {params.layouts} {params.writes}"
                " > {log} 2>&1"
