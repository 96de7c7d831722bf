module github.com/ruled-dev/ruled/sdk

go 1.26.0

require google.golang.org/protobuf v1.36.12
