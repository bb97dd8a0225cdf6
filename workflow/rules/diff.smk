rule diff:
    input:
        # This run's summary, so that a diff against it waits for it; another run's records as they
        # are (a run that does not exist is the diff's one sentence, not Snakemake's missing input).
        a=lambda wildcards: diff_side(wildcards.a),
        b=lambda wildcards: diff_side(wildcards.b),
    output:
        markdown=report(paths.DIFF_MARKDOWN, caption="../report/diff.rst", category="Diff"),
        html=report(paths.DIFF_HTML, caption="../report/diff.rst", category="Diff"),
    log:
        "reports/diff/{a}__vs__{b}/diff.log",
    conda:
        "../../envs/kernelkit.yaml"
    params:
        threshold=config["diff"]["threshold"],
        confidence=config["diff"]["confidence"],
    shell:
        "python -m kernelkit diff results/{wildcards.a} results/{wildcards.b}"
        " --threshold {params.threshold} --confidence {params.confidence}"
        " --markdown {output.markdown} --html {output.html} > {log} 2>&1"
