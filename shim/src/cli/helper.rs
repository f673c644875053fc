//! `rund helper …`: what the static shim cannot run in its own process
//! (NVML and libibverbs are loaded with dlopen), run here and answered as
//! JSON on stdout. Hidden: the shim is its only caller.

use std::io::{Read, Write};

use rund_check::WriteBwParams;

use crate::cli::error::CliError;

#[derive(Debug, clap::Subcommand)]
pub enum HelperCommand {
    /// GPU discovery: the shim's `[devices]` config as JSON on stdin.
    Nvml,
    /// One write_bw run for the gate.
    WriteBw(WriteBwHelperArgs),
}

#[derive(Debug, clap::Args)]
pub struct WriteBwHelperArgs {
    #[arg(long)]
    pub device: String,
    #[arg(long)]
    pub size: u64,
    #[arg(long)]
    pub iters: u64,
    #[arg(long)]
    pub ib_port: u8,
    #[arg(long)]
    pub gid_index: Option<u32>,
}

pub fn run(cmd: &HelperCommand, out: &mut dyn Write) -> Result<(), CliError> {
    let reply = match cmd {
        HelperCommand::Nvml => {
            let mut input = Vec::new();
            std::io::stdin().read_to_end(&mut input)?;
            rund_devices::gpu::helper::serve(&input)
        }
        HelperCommand::WriteBw(a) => {
            let params = WriteBwParams {
                size: a.size,
                iters: a.iters,
                ib_port: a.ib_port,
                gid_index: a.gid_index,
                ..Default::default()
            };
            rund_check::gate::helper::serve(&a.device, &params)
        }
    };
    out.write_all(&reply)?;
    Ok(())
}
