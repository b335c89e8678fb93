'use strict';
// The pg module of the client under test (test/client.js), so that the
// tests' instanceof checks see the classes the client sees.
const path = require('path');

const main = require.resolve(process.env.ORCH_CLIENT_MODULE || '..', { paths: [__dirname] });
module.exports = require(require.resolve('pg', { paths: [path.dirname(main)] }));
