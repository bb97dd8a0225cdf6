rule timing:
    input:
        unpack(timing_inputs),
    output:
        report(
            "results/{run}/timing/{kernel}/{shape}/{layout}/rep{n}.json",
            caption="../report/timing.rst",
            category="Timing samples",
            subcategory="{kernel}",
            labels={"shape": "{shape}", "layout": "{layout}", "repeat": "{n}"},
        ),
    log:
        "results/{run}/logs/timing/{kernel}/{shape}/{layout}/rep{n}.log",
    priority: lambda wildcards: timed_target(wildcards).priority(TIMING["repeats"])
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
    params:
        warmup=TIMING["warmup_launches"],
        launches=TIMING["launches_per_graph"],
        samples=TIMING["samples"],
        order_seed=TIMING["order_seed"],
        order_key=lambda wildcards: timed_target(wildcards).order_key,
    shell:
        "python -m kernelkit time --kernel {wildcards.kernel} --shape {wildcards.shape} --layout {wildcards.layout}"
        " --repeat {wildcards.n} --order-seed {params.order_seed} --order-key {params.order_key}"
        " --warmup {params.warmup} --launches {params.launches} --samples {params.samples}"
        " --correctness {input.correctness} --controls {input.controls} --output {output} > {log} 2>&1"
