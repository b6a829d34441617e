// Command rebill runs the recurring-payments service; see `rebill help`.
package main

import "github.com/rebill/rebill/app"

func main() { app.Main() }
