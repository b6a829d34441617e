package migrations

// NewProvider is newProvider for the external tests, which step the
// schema down and up around data of an older version.
var NewProvider = newProvider
