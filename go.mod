module github.com/pinfold/pinfold

go 1.26.0

require golang.org/x/sys v0.49.0

require github.com/creack/pty v1.1.24 // indirect
