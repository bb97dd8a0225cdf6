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
