rule diff:
    input:
        a="results/{a}/summary.csv",
        b="results/{b}/summary.csv",
    output:
        markdown=report(
            "reports/diff/{a}__vs__{b}/diff.md",
            caption="../report/diff.rst",
            category="Diff",
        ),
        html=report(
            "reports/diff/{a}__vs__{b}/diff.html",
            caption="../report/diff.rst",
            category="Diff",
        ),
    log:
        "logs/diff/{a}__vs__{b}.log",
    conda:
        "../../envs/kernelkit.yaml"
    params:
        threshold=DIFF["threshold"],
        confidence=DIFF["confidence"],
    shell:
        "python -m kernelkit diff results/{wildcards.a} results/{wildcards.b}"
        " --threshold {params.threshold} --confidence {params.confidence}"
        " --markdown {output.markdown} --html {output.html} > {log} 2>&1"
