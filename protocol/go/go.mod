module stepshim.dev/protocol/go

go 1.26
