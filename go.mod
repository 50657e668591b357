module github.com/sandboxd/sandbox

go 1.26
