package provider

// The generators live in GOPATH/bin (go install google.golang.org/protobuf/cmd/protoc-gen-go
// and google.golang.org/grpc/cmd/protoc-gen-go-grpc); protoc comes from Debian's
// protobuf-compiler. The generated code is committed so normal builds need neither.
//go:generate sh -c "PATH=\"$(go env GOPATH)/bin:$PATH\" protoc --proto_path=proto --go_out=providerpb --go_opt=paths=source_relative --go-grpc_out=providerpb --go-grpc_opt=paths=source_relative proto/provider.proto"
