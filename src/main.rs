//! The `convoy` command line (contract in design.md: scripts depend on it).

mod cli;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    // Under `mpirun` (a build with the `mpi` feature), join the other ranks first.
    let out = convoy::distributed::init().and_then(|()| cli::run(args));
    match out {
        Ok(code) => {
            convoy::distributed::finalize();
            code
        }
        Err(e) => {
            match convoy::distributed::world() {
                Some(w) => eprintln!("error: rank {} of {}: {e}", w.rank(), w.size()),
                None => eprintln!("error: {e}"),
            }
            // One rank's error ends every rank (the others would wait for it forever).
            convoy::distributed::abort(1);
            ExitCode::FAILURE
        }
    }
}
