rule timing:
    input:
        unpack(timing_inputs),
    output:
        report(
            paths.TIMING,
            caption="../report/timing.rst",
            category="Timing samples",
            subcategory="{kernel}",
            labels={
                "shape": "{shape}",
                "layout": "{layout}",
                "repeat": "{n}",
                "cache": "{view}",
            },
        ),
    log:
        paths.log(paths.TIMING),
    priority: lambda wildcards: timed_target(wildcards).priority(REPEATS)
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(pooled=True),
    params:
        pin=pin,
        settings=TIMING_SETTINGS,
        order_seed=config["timing"]["order_seed"],
        order_key=lambda wildcards: timed_target(wildcards).order_key,
        cache=lambda wildcards: timed_target(wildcards).cache,
    shell:
        "{params.pin}python -m kernelkit time --kernel {wildcards.kernel} --shape {wildcards.shape} --layout {wildcards.layout}"
        " --repeat {wildcards.n} --order-seed {params.order_seed} --order-key {params.order_key}"
        " --cache {params.cache} --settings {params.settings:q}"
        " --correctness {input.correctness} --controls {input.controls} --sanitizer {input.sanitizer}"
        " --output {output} > {log} 2>&1"


rule span:
    input:
        unpack(span_inputs),
    output:
        report(
            paths.SPAN,
            caption="../report/span.rst",
            category="Span samples",
            subcategory="{kernel}",
            labels={"shape": "{shape}", "repeat": "{n}"},
        ),
    log:
        paths.log(paths.SPAN),
    priority: span_priority
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(pooled=True),
    params:
        pin=pin,
        pairs=span_arguments,
        settings=SPAN_SETTINGS,
    shell:
        "{params.pin}python -m kernelkit span --kernel {wildcards.kernel} --shape {wildcards.shape} {params.pairs}"
        " --controls {input.controls} --sanitizer {input.sanitizer} --repeat {wildcards.n}"
        " --settings {params.settings:q}"
        " --output {output} > {log} 2>&1"


rule profile:
    input:
        unpack(profile_inputs),
    output:
        report(
            paths.PROFILE,
            caption="../report/tools.rst",
            category="Optional tools",
        ),
    log:
        paths.log(paths.PROFILE),
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(),
    params:
        pin=pin,
    shell:
        "{params.pin}python -m kernelkit profile --kernel {wildcards.kernel} --shape {wildcards.shape} --layout {wildcards.layout}"
        " --output {output} > {log} 2>&1"
