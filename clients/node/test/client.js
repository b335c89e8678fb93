'use strict';
// The client under test: this checkout's, or an installed package named by
// ORCH_CLIENT_MODULE (scripts/test-clients.sh installs the packed tarball
// into an application and runs the tests against it).
module.exports = require(process.env.ORCH_CLIENT_MODULE || '..');
