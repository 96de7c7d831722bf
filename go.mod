module github.com/ruled-dev/ruled

go 1.26.0

require github.com/redis/go-redis/v9 v9.23.0

require github.com/fsnotify/fsnotify v1.10.1

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/expr-lang/expr v1.17.8
	go.uber.org/atomic v1.12.0 // indirect
	go.yaml.in/yaml/v3 v3.0.6
	golang.org/x/sys v0.48.0 // indirect
	google.golang.org/protobuf v1.36.12
)
