rule run_config:
    output:
        "results/{run}/config.json",
    log:
        "results/{run}/logs/config.log",
    priority: ENVIRONMENT_PRIORITY
    conda:
        "../../envs/kernelkit.yaml"
    params:
        config_json=lambda wildcards: json.dumps(config, sort_keys=True),
    shell:
        "python -m kernelkit write-config --json {params.config_json:q} --output {output} > {log} 2>&1"


rule environment:
    input:
        "results/{run}/config.json",
    output:
        report(
            "results/{run}/environment.json",
            caption="../report/environment.rst",
            category="Environment",
        ),
    log:
        "results/{run}/logs/environment.log",
    priority: ENVIRONMENT_PRIORITY
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
    shell:
        "python -m kernelkit environment --config {input} --output {output} > {log} 2>&1"


rule ceiling:
    output:
        report(
            "results/{run}/ceilings/{ceiling}.json",
            caption="../report/ceiling.rst",
            category="Environment",
        ),
    log:
        "results/{run}/logs/ceilings/{ceiling}.log",
    priority: CEILING_PRIORITY
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
    params:
        warmup=TIMING["warmup_launches"],
        launches=TIMING["launches_per_graph"],
        samples=TIMING["samples"],
        max_sample_ms=TIMING["max_sample_ms"],
        copy_bytes=CEILINGS["copy_bytes"],
        gemm_n=CEILINGS["gemm_n"],
    shell:
        "python -m kernelkit ceiling --kind {wildcards.ceiling} --warmup {params.warmup} --launches {params.launches}"
        " --samples {params.samples} --max-sample-ms {params.max_sample_ms} --copy-bytes {params.copy_bytes}"
        " --gemm-n {params.gemm_n} --output {output} > {log} 2>&1"
