rule summary:
    input:
        recorded(PLAN.timing_files() + PLAN.timing_files(cache="cold")),
    output:
        report(paths.SUMMARY, caption="../report/summary.rst", category="Timings"),
    log:
        paths.log(paths.SUMMARY),
    conda:
        "../../envs/kernelkit.yaml"
    shell:
        "python -m kernelkit summary --output {output} {input} > {log} 2>&1"


rule figure:
    input:
        lambda wildcards: recorded(PLAN.timing_files(checked_kernel(wildcards), PLAN.caches[0])),
    output:
        report(paths.FIGURE, caption="../report/figure.rst", category="Timings", subcategory="{kernel}"),
    log:
        "reports/{run}/logs/figures/{kernel}.log",
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
        recorded(PLAN.timing_files() + PLAN.timing_files(cache="cold")),
    output:
        report(paths.CLOCK_FIGURE, caption="../report/clocks.rst", category="Timings"),
    log:
        "reports/{run}/logs/figures/clocks.log",
    conda:
        "../../envs/kernelkit.yaml"
    shell:
        "python -m kernelkit clock-figure --output {output} {input} > {log} 2>&1"


rule report:
    input:
        config=paths.CONFIG,
        environment=paths.ENVIRONMENT,
        checks=recorded([name for kernel in KERNELS for name in PLAN.correctness_files(kernel)
                         + PLAN.control_files(kernel) + PLAN.sanitizer_files(kernel)]),
        timing=recorded(PLAN.timing_files() + PLAN.timing_files(cache="cold")),
        span=recorded(PLAN.span_files()),
        ceilings=recorded(PLAN.ceiling_files()),
        profile=recorded(PLAN.profile_files()),
        summary=paths.SUMMARY,
        figures=expand(paths.FIGURE, run="{run}", kernel=KERNELS),
        clocks=paths.CLOCK_FIGURE,
        kernel_folders=report_kernel_files(),
    output:
        markdown=report(paths.REPORT_MARKDOWN, caption="../report/report.rst", category="Report"),
        html=report(paths.REPORT_HTML, caption="../report/report.rst", category="Report"),
    log:
        "reports/{run}/logs/report.log",
    conda:
        "../../envs/kernelkit.yaml"
    shell:
        "python -m kernelkit report results/{wildcards.run} --figures reports/{wildcards.run}/figures"
        " --markdown {output.markdown} --html {output.html} > {log} 2>&1"
