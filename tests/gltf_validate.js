// Validate a .glb/.gltf with the Khronos glTF-Validator (npm package gltf-validator).
// usage: node gltf_validate.js FILE   (NODE_PATH or MESHLIFT_GLTF_VALIDATOR_DIR = <prefix>/node_modules)
// prints the report's issue summary as JSON; exit status 0 when there are zero errors.
const fs = require("fs");
const path = require("path");
const dir = process.env.MESHLIFT_GLTF_VALIDATOR_DIR;
const validator = require(dir ? path.join(dir, "gltf-validator") : "gltf-validator");
const file = process.argv[2];
const bytes = new Uint8Array(fs.readFileSync(file));
validator
  .validateBytes(bytes, {
    uri: file,
    maxIssues: 100,
    externalResourceFunction: (uri) =>
      new Promise((resolve, reject) => {
        fs.readFile(path.join(path.dirname(file), decodeURIComponent(uri)), (err, data) =>
          err ? reject(err.toString()) : resolve(new Uint8Array(data)));
      }),
  })
  .then((report) => {
    const out = {
      numErrors: report.issues.numErrors,
      numWarnings: report.issues.numWarnings,
      messages: report.issues.messages.map((m) => `${m.severity} ${m.code} ${m.pointer || ""} ${m.message}`),
    };
    console.log(JSON.stringify(out));
    process.exit(report.issues.numErrors === 0 ? 0 : 1);
  })
  .catch((err) => {
    console.error(String(err));
    process.exit(2);
  });
