rule correctness:
    input:
        kernel_sources,
    output:
        paths.CORRECTNESS,
    log:
        paths.log(paths.CORRECTNESS),
    priority: correctness_priority
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(pooled=True),
    params:
        pin=pin,
        layout=checked_layout,
        settings=CHECK_SETTINGS,
    shell:
        "{params.pin}python -m kernelkit correctness --kernel {wildcards.kernel} --layout {params.layout}"
        " --settings {params.settings:q} --output {output} > {log} 2>&1"


# Negative controls and the sanitizer need no correctness record: each gates timing on its own
# (kernelkit.checks.require_checked reads all of them), so they run beside the correctness jobs
# instead of after them. Chained, rmsnorm's controls, which every rmsnorm timing waits for, began
# 8.5 s into a two-H200 run and ended at 23.1 s (h200-w2x2c).
rule negative_control:
    input:
        sources=kernel_sources,
    output:
        paths.CONTROL,
    log:
        paths.log(paths.CONTROL),
    priority: control_priority
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(pooled=True),
    params:
        pin=pin,
        control=checked_control,
        layouts=lambda wildcards: " ".join(
            f"--layout {layout}" for layout in hand_written_layouts(wildcards.kernel)
        ),
        settings=CHECK_SETTINGS,
    shell:
        "{params.pin}python -m kernelkit control --kernel {wildcards.kernel} --control {params.control}"
        " {params.layouts} --settings {params.settings:q} --output {output} > {log} 2>&1"


rule sanitize:
    input:
        sources=kernel_sources,
    output:
        report(
            paths.SANITIZER,
            caption="../report/tools.rst",
            category="Checks",
        ),
    log:
        paths.log(paths.SANITIZER),
    # A check like correctness: it gates the timing of the kernel's hand-written layouts, so it runs
    # before any timed target.
    priority: sanitizer_priority
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(pooled=True),
    params:
        pin=pin,
        layouts=lambda wildcards: " ".join(f"--layout {name}" for name in sanitized_layouts(wildcards)),
    shell:
        "{params.pin}python -m kernelkit sanitize --kernel {wildcards.kernel} {params.layouts}"
        " --output {output} > {log} 2>&1"
