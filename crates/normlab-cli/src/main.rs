//! The `normlab` binary: argument parsing, dispatch to the library, one-line
//! errors with exit code 2 for bad input (1 for other failures).

mod cmd_bench;
mod cmd_book;
mod cmd_calc;
mod cmd_convert;
mod cmd_exp;
mod cmd_generate;
mod cmd_inspect;
mod cmd_sweep;
mod cmd_train;
mod flags;
mod ui;
mod web;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// normlab: a workbench for residual connections and normalization in deep
/// Transformers (LayerNorm, RMSNorm and their placements).
#[derive(Parser, Debug)]
#[command(name = "normlab", version, disable_help_subcommand = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Normalise a vector with any norm kind and show its invariances.
    Calc(cmd_calc::CalcArgs),
    /// Train a toy net or a GPT with any norm kind, placement and residual setting.
    ///
    /// Every option can also be given in a TOML file (`--config run.toml`,
    /// keys as the flags with '_' or '-'); flags override the file.
    Train(Box<cmd_train::TrainArgs>),
    /// The headline results, written to normlab-demo/report.md: about 2.5 minutes on 2 cores (--quick: about 20 seconds).
    Demo(cmd_exp::DemoCmd),
    /// Run a built-in experiment (`normlab exp list` names them).
    Exp(Box<cmd_exp::ExpCmd>),
    /// Every experiment at its full setting, then findings.md: the lesson's claims, checked.
    Book(cmd_book::BookCmd),
    /// Run a grid of training runs in parallel: resumable, shardable (Slurm, Kubernetes).
    Sweep(cmd_sweep::SweepCmd),
    /// Tables and figures from a folder of runs.
    Report(cmd_sweep::ReportCmd),
    /// The web lab: norm calculator, depth simulator and runs dashboard in the browser.
    Serve(web::ServeCmd),
    /// The web lab as a static folder any web server can host (the widgets in WebAssembly, the book's pages as files).
    Site(web::SiteCmd),
    /// Convert a checkpoint between LayerNorm and RMSNorm (exact where the maths allows).
    Convert(cmd_convert::ConvertCmd),
    // (Their help names the families of the registry: decoder/family.rs.)
    #[command(about = cmd_inspect::about())]
    Inspect(cmd_inspect::InspectCmd),
    #[command(about = cmd_generate::about())]
    Generate(cmd_generate::GenerateCmd),
    /// Benchmarks (medians, next to a roofline measured in the same run).
    #[command(subcommand)]
    Bench(cmd_bench::BenchCommand),
}

fn main() -> ExitCode {
    let serving = std::env::args().nth(1).as_deref() == Some("serve");
    if !serving {
        // Output piped into `head` and closed early ends normlab quietly,
        // as it ends other Unix tools (Rust ignores SIGPIPE by default, and
        // println! then panics on the broken pipe). The web server keeps the
        // default: a client that goes away must not end it.
        // SAFETY: restoring the default disposition of a signal, before any
        // thread exists.
        unsafe {
            libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        }
    }
    let argv: Vec<String> = std::env::args().collect();
    if let Some(help) = cmd_exp::experiment_help(&argv, &<Cli as clap::CommandFactory>::command()) {
        print!("{help}");
        return ExitCode::SUCCESS;
    }
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return if e.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                    ExitCode::from(2)
                } else {
                    ExitCode::SUCCESS
                };
            }
            return ui::fail(&ui::BadInput(ui::clap_one_line(&e)).into());
        }
    };
    let result = match cli.command {
        Command::Calc(a) => cmd_calc::run(a),
        Command::Bench(b) => cmd_bench::run(b),
        Command::Train(a) => cmd_train::run(*a),
        Command::Exp(c) => cmd_exp::run(*c),
        Command::Demo(c) => cmd_exp::demo(c),
        Command::Book(c) => cmd_book::book(c),
        Command::Serve(c) => web::run(c),
        Command::Site(c) => web::site(c),
        Command::Convert(c) => cmd_convert::run(c),
        Command::Inspect(c) => cmd_inspect::run(c),
        Command::Generate(c) => cmd_generate::run(c),
        Command::Sweep(c) => cmd_sweep::sweep_run(c),
        Command::Report(c) => cmd_sweep::report_run(c),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => ui::fail(&e),
    }
}
