//! rund-bench: rund against runc-v2, side by side on one private containerd.
//! See `rund-bench --help`; `make bench` and `make bench-quick` run it.

mod api;
mod cli;
mod cpu;
mod ctr;
mod env;
mod measure;
mod pidfd;
mod procfs;
mod progress;
mod report;
mod results;
mod run;
mod runtime;
mod stats;

use clap::Parser;

fn main() -> std::process::ExitCode {
    let plan = match cli::Args::parse().plan() {
        Ok(p) => p,
        Err(e) => {
            eprintln!("rund-bench: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    progress::install_interrupt_handler();
    let results = match run::run(&plan) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rund-bench: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    print!("{}", report::table::render(&results));
    match report::write_files(&results, &plan.out_dir) {
        Ok([json, svg]) => {
            println!("\nraw samples: {}\nplot: {}", json.display(), svg.display());
            std::process::ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!(
                "rund-bench: writing results to {}: {e}",
                plan.out_dir.display()
            );
            std::process::ExitCode::FAILURE
        }
    }
}
