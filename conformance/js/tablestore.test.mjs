// Conformance tests through the official JavaScript SDK (@azure/data-tables),
// run by conformance/js_test.go against the in-process cluster. The Go test
// passes the endpoints in the environment:
//   TS_ENDPOINT          http path-style endpoint of devstoreaccount1
//   TS_ACCOUNT, TS_KEY   its account name and key
//   TS_HTTPS_ENDPOINT    https endpoint of a front-end with --oauth basic
//                        (NODE_EXTRA_CA_CERTS trusts its certificate)
//   TS_TOKEN             a bearer token that front-end accepts
//   TS_MULTI_ENDPOINT    http://host:port of a front-end serving AZURITE_ACCOUNTS
//   TS_MULTI_ACCOUNTS    that AZURITE_ACCOUNTS value
import { test } from "node:test";
import assert from "node:assert/strict";
import { TableClient, TableServiceClient, AzureNamedKeyCredential } from "@azure/data-tables";

const env = process.env;
const insecure = { allowInsecureConnection: true, retryOptions: { maxRetries: 2 } };
const cred = new AzureNamedKeyCredential(env.TS_ACCOUNT, env.TS_KEY);
let seq = 0;
const tableName = (p) => `${p}${Date.now() % 1e8}${seq++}`;

async function newTable(prefix) {
  const name = tableName(prefix);
  const client = new TableClient(env.TS_ENDPOINT, name, cred, insecure);
  await client.createTable();
  return client;
}

async function rejects(promise, status, code) {
  try {
    await promise;
  } catch (e) {
    assert.equal(e.statusCode, status, `status of ${e.message}`);
    // RestError.code is not always set; the header is what SDKs read.
    assert.equal(e.code ?? e.response?.headers?.get("x-ms-error-code"), code, `code of ${e.message}`);
    return;
  }
  assert.fail(`expected ${status} ${code}`);
}

test("typed null from an invalid Date or Infinity is 400 InvalidInput and writes nothing", async () => {
  const t = await newTable("jsnull");
  await rejects(t.createEntity({ partitionKey: "p", rowKey: "date", when: new Date("not a date") }), 400, "InvalidInput");
  await rejects(t.createEntity({ partitionKey: "p", rowKey: "inf", v: { value: Infinity, type: "Double" } }), 400, "InvalidInput");
  await rejects(t.getEntity("p", "date"), 404, "ResourceNotFound");
  await rejects(t.getEntity("p", "inf"), 404, "ResourceNotFound");
});

test("If-Match: a stale weak ETag is 412, a strong one 400", async () => {
  const t = await newTable("jsetag");
  const created = await t.createEntity({ partitionKey: "p", rowKey: "r", n: 1 });
  await rejects(t.updateEntity({ partitionKey: "p", rowKey: "r", n: 2 }, "Merge", { etag: 'W/"stale"' }), 412, "UpdateConditionNotSatisfied");
  await rejects(t.updateEntity({ partitionKey: "p", rowKey: "r", n: 2 }, "Merge", { etag: created.etag.slice(2) }), 400, "InvalidInput");
  await t.updateEntity({ partitionKey: "p", rowKey: "r", n: 3 }, "Merge", { etag: created.etag });
  assert.equal((await t.getEntity("p", "r")).n, 3);
});

test("Boolean literals in $filter ignore case", async () => {
  const t = await newTable("jsbool");
  await t.createEntity({ partitionKey: "p", rowKey: "yes", b: true });
  await t.createEntity({ partitionKey: "p", rowKey: "no", b: false });
  for (const [filter, want] of [["b eq True", "yes"], ["b eq FALSE", "no"]]) {
    const rows = [];
    for await (const e of t.listEntities({ queryOptions: { filter } })) rows.push(e.rowKey);
    assert.deepEqual(rows, [want], filter);
  }
});

test("service stats only on the -secondary endpoint", async () => {
  const primary = new TableServiceClient(env.TS_ENDPOINT, cred, insecure);
  await rejects(primary.getStatistics(), 400, "InvalidQueryParameterValue");
  const secondary = new TableServiceClient(env.TS_ENDPOINT + "-secondary", cred, insecure);
  // "bootstrap" (Azure's answer while the secondary is not in sync) is
  // right while a range has no confirmed sync time yet: the earlier tests'
  // tables, some quiet, each wait for their first confirmation. Polled
  // with a deadline rather than asserted once (it failed 2 runs of 8).
  let stats;
  for (const deadline = Date.now() + 30e3; ; ) {
    stats = await secondary.getStatistics();
    if (stats.geoReplication.status === "live" || Date.now() > deadline) break;
    await new Promise((resolve) => setTimeout(resolve, 250));
  }
  assert.equal(stats.geoReplication.status, "live");
  assert.ok(stats.geoReplication.lastSyncTime instanceof Date);
});

test("HTTPS with a trusted certificate and an OAuth token credential", async () => {
  const token = { getToken: async () => ({ token: env.TS_TOKEN, expiresOnTimestamp: Date.now() + 3600e3 }) };
  const name = tableName("jsoauth");
  const client = new TableClient(env.TS_HTTPS_ENDPOINT, name, token);
  await client.createTable();
  await client.createEntity({ partitionKey: "p", rowKey: "r", v: "over https" });
  assert.equal((await client.getEntity("p", "r")).v, "over https");
  const svc = new TableServiceClient(env.TS_HTTPS_ENDPOINT, new AzureNamedKeyCredential(env.TS_ACCOUNT, env.TS_KEY));
  const names = [];
  for await (const t of svc.listTables()) names.push(t.name);
  assert.ok(names.includes(name));
});

test("several accounts, both keys, isolated tables", async () => {
  const accounts = env.TS_MULTI_ACCOUNTS.split(";").map((a) => a.split(":"));
  const [one, oneKey1, oneKey2] = accounts[0];
  const [two, twoKey] = accounts[1];
  const name = tableName("jsacct");
  const c1 = new TableClient(`${env.TS_MULTI_ENDPOINT}/${one}`, name, new AzureNamedKeyCredential(one, oneKey1), insecure);
  await c1.createTable();
  await c1.createEntity({ partitionKey: "p", rowKey: "r", who: one });
  const c1b = new TableClient(`${env.TS_MULTI_ENDPOINT}/${one}`, name, new AzureNamedKeyCredential(one, oneKey2), insecure);
  assert.equal((await c1b.getEntity("p", "r")).who, one);
  const c2 = new TableClient(`${env.TS_MULTI_ENDPOINT}/${two}`, name, new AzureNamedKeyCredential(two, twoKey), insecure);
  await rejects(c2.getEntity("p", "r"), 404, "TableNotFound");
  const stolen = new TableClient(`${env.TS_MULTI_ENDPOINT}/${one}`, name, new AzureNamedKeyCredential(one, twoKey), insecure);
  await rejects(stolen.getEntity("p", "r"), 403, "AuthenticationFailed");
});
