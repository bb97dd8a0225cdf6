# The checks of one kernel, each stage one process for all its layouts or controls, gate every
# timing of the kernel (kernelkit.cases.require_checked). One rule body serves the three stages;
# each keeps its own name, shell text and params, which Snakemake compares to decide what to rerun.
WRITES_FOLDER = " --settings {params.settings:q} --output-dir {params.folder} > {log} 2>&1"
for kernel in KERNELS:
    for rule_name, command, files, log_file, layouts, tail in (
        ("correctness", "correctness", PLAN.correctness_files(kernel), paths.log(paths.CORRECTNESS),
         LAYOUTS[kernel], WRITES_FOLDER),
        ("negative_controls", "control", PLAN.control_files(kernel), paths.log(paths.CONTROL),
         PLAN.control_layouts(kernel), WRITES_FOLDER),
        ("sanitize", "sanitize", PLAN.sanitizer_files(kernel), paths.log(paths.SANITIZER),
         PLAN.hand_written(kernel), " --output {output} > {log} 2>&1"),
    ):
        if not files:
            continue
        writes = {} if command == "sanitize" else {"folder": lambda wildcards, output: os.path.dirname(output[0]),
                                                     "settings": CheckSettings.json_from_config(config)}

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
                layouts=" ".join(f"--layout {name}" for name in layouts),
                **writes,
                kernel=kernel,
            shell:
                f"{{params.pin}}python -m kernelkit {command} --kernel {{params.kernel}} {{params.layouts}}{tail}"
