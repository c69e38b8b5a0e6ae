// Compiles the forwarder (OpenZeppelin Contracts v5, from node_modules) and Relay's own
// recipient with solc-js, offline: node compile.mjs <out.json>. Writes {contract: {abi,
// bytecode}} plus the compiler and library versions it used.
import { readFileSync, writeFileSync, mkdirSync } from "node:fs";
import { dirname, join } from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const require = createRequire(join(process.cwd(), "package.json"));
const solc = require("solc");
const modules = join(process.cwd(), "node_modules");

const sources = {
  "@openzeppelin/contracts/metatx/ERC2771Forwarder.sol": "ERC2771Forwarder",
  "RelayRecipient.sol": "RelayRecipient",
};
const input = {
  language: "Solidity",
  sources: {
    "@openzeppelin/contracts/metatx/ERC2771Forwarder.sol": {
      content: readFileSync(join(modules, "@openzeppelin/contracts/metatx/ERC2771Forwarder.sol"), "utf8"),
    },
    "RelayRecipient.sol": {
      content: readFileSync(join(here, "contracts", "RelayRecipient.sol"), "utf8"),
    },
  },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object"] } },
  },
};

function findImports(path) {
  try {
    return { contents: readFileSync(join(modules, path), "utf8") };
  } catch (error) {
    return { error: `cannot read ${path}: ${error.message}` };
  }
}

const output = JSON.parse(solc.compile(JSON.stringify(input), { import: findImports }));
const errors = (output.errors || []).filter((e) => e.severity === "error");
if (errors.length) {
  for (const error of errors) console.error(error.formattedMessage);
  process.exit(1);
}
const artifacts = {};
for (const [file, name] of Object.entries(sources)) {
  const contract = output.contracts[file][name];
  artifacts[name] = { abi: contract.abi, bytecode: "0x" + contract.evm.bytecode.object };
}
const out = process.argv[2];
mkdirSync(dirname(out), { recursive: true });
writeFileSync(
  out,
  JSON.stringify({
    compiler: solc.version(),
    openzeppelin: JSON.parse(readFileSync(join(modules, "@openzeppelin/contracts/package.json"), "utf8")).version,
    contracts: artifacts,
  }),
);
console.log(`compiled ${Object.keys(artifacts).join(", ")} with solc ${solc.version()} -> ${out}`);
