rule summary:
    input:
        timing_files(),
    output:
        report(
            "results/{run}/summary.csv",
            caption="../report/summary.rst",
            category="Timings",
        ),
    log:
        "results/{run}/logs/summary.log",
    conda:
        "../../envs/kernelkit.yaml"
    shell:
        "python -m kernelkit summary --output {output} {input} > {log} 2>&1"


rule figure:
    input:
        figure_inputs,
    output:
        report(
            "reports/{run}/figures/{kernel}.svg",
            caption="../report/figure.rst",
            category="Timings",
            subcategory="{kernel}",
        ),
    log:
        "results/{run}/logs/figures/{kernel}.log",
    conda:
        "../../envs/kernelkit.yaml"
    shell:
        "python -m kernelkit figure --kernel {wildcards.kernel} --output {output} {input} > {log} 2>&1"


rule report:
    input:
        config="results/{run}/config.json",
        environment="results/{run}/environment.json",
        correctness=[correctness_files(kernel) for kernel in KERNELS],
        controls=[control_files(kernel) for kernel in KERNELS],
        timing=timing_files(),
        span=span_files(),
        summary="results/{run}/summary.csv",
        figures=expand("reports/{{run}}/figures/{kernel}.svg", kernel=KERNELS),
    output:
        markdown=report(
            "reports/{run}/report.md",
            caption="../report/report.rst",
            category="Report",
        ),
        html=report(
            "reports/{run}/report.html",
            caption="../report/report.rst",
            category="Report",
        ),
    log:
        "results/{run}/logs/report.log",
    conda:
        "../../envs/kernelkit.yaml"
    shell:
        "python -m kernelkit report results/{wildcards.run} --figures reports/{wildcards.run}/figures"
        " --markdown {output.markdown} --html {output.html} > {log} 2>&1"
