//! `kerf serve`.

use clap::Args;

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {}

pub async fn run(_args: ServeArgs) -> anyhow::Result<()> {
    anyhow::bail!("kerf serve: not implemented yet")
}
