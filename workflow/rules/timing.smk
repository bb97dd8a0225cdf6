# Timing: one process per kernel/shape/repeat/cache times every layout in a seeded shuffled order, a
# record each, once its checks passed in this run (their records are inputs: cases.require_checked).
TIMING_SETTINGS = TimingSettings.json_from_config(config)
for kernel in KERNELS:

    rule:
        name:
            f"timing_{kernel}"
        input:
            **checks_of(kernel),
        output:
            [paths.TIMING.replace("{kernel}", kernel).replace("{layout}", name) for name in LAYOUTS[kernel]],
        log:
            paths.log(paths.TIMING).replace("{kernel}", kernel).replace("{layout}", "all"),
        priority: lambda wildcards, kernel=kernel: timing_job(kernel, wildcards).priority(PLAN.repeats)
        conda:
            "../../envs/kernelkit.yaml"
        resources:
            gpu=1,
            **card_resources(kernel),
        params:
            pin=pin(kernel),
            layouts=" ".join(f"--layout {name}" for name in LAYOUTS[kernel]),
            folder=lambda wildcards, output: os.path.dirname(os.path.dirname(output[0])),
            order_key=lambda wildcards, kernel=kernel: timing_job(kernel, wildcards).order_key,
            cache=lambda wildcards, kernel=kernel: timing_job(kernel, wildcards).cache,
            settings=TIMING_SETTINGS,
            order_seed=config["timing"]["order_seed"],
            kernel=kernel,
        shell:
            "{params.pin}python -m kernelkit time --kernel {params.kernel} --shape {wildcards.shape} {params.layouts}"
            " --repeat {wildcards.n} --order-seed {params.order_seed} --order-key {params.order_key}"
            " --cache {params.cache} --settings {params.settings:q}"
            " --correctness {input.correctness} --controls {input.controls} --sanitizer {input.sanitizer}"
            " --output-dir {params.folder} > {log} 2>&1"


rule span:
    input:
        unpack(lambda wildcards: checks_of(checked_kernel(wildcards))),
    output:
        paths.SPAN,
    log:
        paths.log(paths.SPAN),
    priority: lambda wildcards: PLAN.span_priority(checked_span(wildcards))
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(),
    params:
        pin=pin(),
        pairs=lambda wildcards, input: " ".join(f"--layout {name} --correctness {path}"
                                                for name, path in zip(LAYOUTS[wildcards.kernel], input.correctness)),
        settings=SpanSettings.json_from_config(config),
    shell:
        "{params.pin}python -m kernelkit span --kernel {wildcards.kernel} --shape {wildcards.shape} {params.pairs}"
        " --controls {input.controls} --sanitizer {input.sanitizer} --repeat {wildcards.n}"
        " --settings {params.settings:q} --output {output} > {log} 2>&1"


rule profile:
    input:
        profile_inputs,
    output:
        paths.PROFILE,
    log:
        paths.log(paths.PROFILE),
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(),
    params:
        pin=pin(),
    shell:
        "{params.pin}python -m kernelkit profile --kernel {wildcards.kernel} --shape {wildcards.shape} --layout {wildcards.layout}"
        " --output {output} > {log} 2>&1"
