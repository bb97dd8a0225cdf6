rule summary:
    input:
        timing_files() + timing_files(cache="cold"),
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
    wildcard_constraints:
        # figures/clocks.svg is the clock figure's (a kernel folder cannot be named "clocks").
        # The lookahead reads past the wildcard: "$" is not honoured inside a constraint.
        kernel=r"(?!clocks\.svg)[A-Za-z0-9_]+",
    conda:
        "../../envs/kernelkit.yaml"
    shell:
        "python -m kernelkit figure --kernel {wildcards.kernel} --output {output} {input} > {log} 2>&1"


rule clock_figure:
    input:
        timing_files() + timing_files(cache="cold"),
    output:
        report(
            "reports/{run}/figures/clocks.svg",
            caption="../report/clocks.rst",
            category="Timings",
        ),
    log:
        "results/{run}/logs/figures/clocks.log",
    conda:
        "../../envs/kernelkit.yaml"
    shell:
        "python -m kernelkit clock-figure --output {output} {input} > {log} 2>&1"


rule report:
    input:
        config="results/{run}/config.json",
        environment="results/{run}/environment.json",
        correctness=[correctness_files(kernel) for kernel in KERNELS],
        controls=[control_files(kernel) for kernel in KERNELS],
        timing=timing_files(),
        cold=timing_files(cache="cold"),
        span=span_files(),
        ceilings=ceiling_files(),
        sanitizer=sanitizer_files(),
        profile=profile_files(),
        summary="results/{run}/summary.csv",
        figures=expand("reports/{{run}}/figures/{kernel}.svg", kernel=KERNELS),
        clocks="reports/{run}/figures/clocks.svg",
        kernel_folders=report_kernel_files(),
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
