//! `kerf recommend`.

use super::RecommendArgs;

pub async fn run(_args: RecommendArgs) -> anyhow::Result<()> {
    anyhow::bail!("kerf recommend: not implemented yet")
}
