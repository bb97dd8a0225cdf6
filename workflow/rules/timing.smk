rule timing:
    input:
        unpack(timing_inputs),
    output:
        report(
            "results/{run}/{view}/{kernel}/{shape}/{layout}/rep{n}.json",
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
        "results/{run}/logs/{view}/{kernel}/{shape}/{layout}/rep{n}.log",
    priority: lambda wildcards: timed_target(wildcards).priority(TIMING["repeats"])
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
    params:
        warmup=TIMING["warmup_launches"],
        launches=TIMING["launches_per_graph"],
        samples=TIMING["samples"],
        max_sample_ms=TIMING["max_sample_ms"],
        placements=TIMING["placements"],
        order_seed=TIMING["order_seed"],
        order_key=lambda wildcards: timed_target(wildcards).order_key,
        cache=lambda wildcards: timed_target(wildcards).cache,
        sampler=sampler_arguments,
        stop=stop_arguments,
    shell:
        "python -m kernelkit time --kernel {wildcards.kernel} --shape {wildcards.shape} --layout {wildcards.layout}"
        " --repeat {wildcards.n} --order-seed {params.order_seed} --order-key {params.order_key}"
        " --warmup {params.warmup} --launches {params.launches} --samples {params.samples}"
        " --max-sample-ms {params.max_sample_ms} --placements {params.placements} --cache {params.cache}"
        " {params.sampler} {params.stop}"
        " --correctness {input.correctness} --controls {input.controls} --output {output} > {log} 2>&1"


rule span:
    input:
        unpack(span_inputs),
    output:
        report(
            "results/{run}/span/{kernel}/{shape}/rep{n}.json",
            caption="../report/span.rst",
            category="Span samples",
            subcategory="{kernel}",
            labels={"shape": "{shape}", "repeat": "{n}"},
        ),
    log:
        "results/{run}/logs/span/{kernel}/{shape}/rep{n}.log",
    priority: span_priority
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
    params:
        pairs=span_arguments,
        warmup=SPAN["warmup_calls"] if SPAN else 0,
        rounds=SPAN["rounds"] if SPAN else 0,
        samples=SPAN["samples_per_round"] if SPAN else 0,
        sampler=sampler_arguments,
    shell:
        "python -m kernelkit span --kernel {wildcards.kernel} --shape {wildcards.shape} {params.pairs}"
        " --controls {input.controls} --repeat {wildcards.n} --warmup {params.warmup}"
        " --rounds {params.rounds} --samples {params.samples} {params.sampler} --output {output} > {log} 2>&1"


rule profile:
    input:
        unpack(profile_inputs),
    output:
        report(
            "results/{run}/profile/{kernel}/{shape}/{layout}.json",
            caption="../report/tools.rst",
            category="Optional tools",
        ),
    log:
        "results/{run}/logs/profile/{kernel}/{shape}/{layout}.log",
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
    shell:
        "python -m kernelkit profile --kernel {wildcards.kernel} --shape {wildcards.shape} --layout {wildcards.layout}"
        " --output {output} > {log} 2>&1"
