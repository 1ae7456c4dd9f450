# kerf image: a static (musl) binary on distroless/static, running as a non-root user.
#   docker build -t kerf:0.1.0 .
FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends musl-tools \
 && rm -rf /var/lib/apt/lists/* \
 && rustup target add x86_64-unknown-linux-musl
WORKDIR /src
COPY . .
RUN cargo build --release --locked --target x86_64-unknown-linux-musl --bin kerf \
 && install -D -m 0755 target/x86_64-unknown-linux-musl/release/kerf /out/kerf

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/kerf /kerf
# distroless "nonroot" (65532), matching the Deployment's runAsUser.
USER 65532:65532
EXPOSE 8443 8080
ENTRYPOINT ["/kerf"]
