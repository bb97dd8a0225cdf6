rule run_config:
    output:
        "results/{run}/config.json",
    params:
        config_json=lambda wildcards: json.dumps(config, sort_keys=True),
    log:
        "results/{run}/logs/config.log",
    shell:
        "{KIT} write-config --json {params.config_json:q} --output {output} > {log} 2>&1"


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
    resources:
        gpu=1,
    shell:
        "{KIT} environment --config {input} --output {output} > {log} 2>&1"
