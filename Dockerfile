# Placeholder until the shipping issue: builds the kerf binary.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --bin kerf

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /src/target/release/kerf /kerf
USER nonroot
ENTRYPOINT ["/kerf"]
