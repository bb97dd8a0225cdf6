# The checks of one kernel, each stage one process for all its layouts or controls: they gate
# every timing of the kernel (kernelkit.cases.require_checked reads their records), so they run
# before any timing, and beside each other (each takes the GPU lock only for its GPU part).
for kernel in KERNELS:

    rule:
        name:
            f"correctness_{kernel}"
        input:
            kernel_sources(kernel),
        output:
            PLAN.correctness_files(kernel),
        log:
            paths.path(paths.log(paths.CORRECTNESS), run=RUN, kernel=kernel, layout="all"),
        priority: check_priority(kernel)
        conda:
            "../../envs/kernelkit.yaml"
        resources:
            gpu=1,
            **card_resources(kernel),
        params:
            pin=pin(kernel),
            layouts=" ".join(f"--layout {name}" for name in LAYOUTS[kernel]),
            folder=lambda wildcards, output: os.path.dirname(output[0]),
            settings=CHECK_SETTINGS,
            kernel=kernel,
        shell:
            "{params.pin}python -m kernelkit correctness --kernel {params.kernel} {params.layouts}"
            " --settings {params.settings:q} --output-dir {params.folder} > {log} 2>&1"

    if PLAN.control_files(kernel):

        rule:
            name:
                f"negative_controls_{kernel}"
            input:
                kernel_sources(kernel),
            output:
                PLAN.control_files(kernel),
            log:
                paths.path(paths.log(paths.CONTROL), run=RUN, kernel=kernel, control="all"),
            priority: check_priority(kernel)
            conda:
                "../../envs/kernelkit.yaml"
            resources:
                gpu=1,
                **card_resources(kernel),
            params:
                pin=pin(kernel),
                layouts=" ".join(f"--layout {name}" for name in PLAN.control_layouts(kernel)),
                folder=lambda wildcards, output: os.path.dirname(output[0]),
                settings=CHECK_SETTINGS,
                kernel=kernel,
            shell:
                "{params.pin}python -m kernelkit control --kernel {params.kernel} {params.layouts}"
                " --settings {params.settings:q} --output-dir {params.folder} > {log} 2>&1"

    if PLAN.sanitizer_files(kernel):

        rule:
            name:
                f"sanitize_{kernel}"
            input:
                kernel_sources(kernel),
            output:
                PLAN.sanitizer_files(kernel),
            log:
                paths.path(paths.log(paths.SANITIZER), run=RUN, kernel=kernel),
            priority: check_priority(kernel)
            conda:
                "../../envs/kernelkit.yaml"
            resources:
                gpu=1,
                **card_resources(kernel),
            params:
                pin=pin(kernel),
                layouts=" ".join(f"--layout {name}" for name in PLAN.hand_written(kernel)),
                kernel=kernel,
            shell:
                "{params.pin}python -m kernelkit sanitize --kernel {params.kernel} {params.layouts}"
                " --output {output} > {log} 2>&1"
