rule diff:
    input:
        a=paths.path(paths.SUMMARY, run="{a}"),
        b=paths.path(paths.SUMMARY, run="{b}"),
    output:
        markdown=report(
            paths.DIFF_MARKDOWN,
            caption="../report/diff.rst",
            category="Diff",
        ),
        html=report(
            paths.DIFF_HTML,
            caption="../report/diff.rst",
            category="Diff",
        ),
    log:
        "logs/diff/{a}__vs__{b}.log",
    conda:
        "../../envs/kernelkit.yaml"
    params:
        threshold=config["diff"]["threshold"],
        confidence=config["diff"]["confidence"],
    shell:
        "python -m kernelkit diff results/{wildcards.a} results/{wildcards.b}"
        " --threshold {params.threshold} --confidence {params.confidence}"
        " --markdown {output.markdown} --html {output.html} > {log} 2>&1"
