rule run_config:
    output:
        paths.CONFIG,
    log:
        paths.log(paths.CONFIG),
    priority: ENVIRONMENT_PRIORITY
    conda:
        "../../envs/kernelkit.yaml"
    params:
        config_json=lambda wildcards: json.dumps(config, sort_keys=True),
    shell:
        "python -m kernelkit write-config --json {params.config_json:q} --output {output} > {log} 2>&1"


rule environment:
    input:
        frozen([paths.CONFIG]),
    output:
        report(paths.ENVIRONMENT, caption="../report/environment.rst", category="Environment"),
    log:
        paths.log(paths.ENVIRONMENT),
    priority: ENVIRONMENT_PRIORITY
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(),
    params:
        pin=pin(),
    shell:
        "{params.pin}python -m kernelkit environment --config {input} --output {output} > {log} 2>&1"


rule ceiling:
    output:
        report(paths.CEILING, caption="../report/ceiling.rst", category="Environment"),
    log:
        paths.log(paths.CEILING),
    priority: CEILING_PRIORITY
    conda:
        "../../envs/kernelkit.yaml"
    resources:
        gpu=1,
        **card_resources(),
    params:
        pin=pin(),
        settings=CeilingSettings.json_from_config(config),
    shell:
        "{params.pin}python -m kernelkit ceiling --kind {wildcards.ceiling} --settings {params.settings:q}"
        " --output {output} > {log} 2>&1"


# Every further card of a multi-GPU run records its own environment and ceilings (layout.py).
use rule environment as card_environment with:
    output:
        paths.CARD_ENVIRONMENT,
    log:
        paths.log(paths.CARD_ENVIRONMENT),


use rule ceiling as card_ceiling with:
    output:
        paths.CARD_CEILING,
    log:
        paths.log(paths.CARD_CEILING),
