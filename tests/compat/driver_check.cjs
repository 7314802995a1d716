// Exercises the official Node driver against the server at argv[2]; prints one JSON line of results.
const { MongoClient } = require("mongodb");

async function main() {
  const client = new MongoClient(process.argv[2], { serverSelectionTimeoutMS: 30000 });
  const results = {};
  await client.connect();
  const db = client.db(process.argv[3]);
  const items = db.collection("items");
  try {
    await items.insertMany(Array.from({ length: 25 }, (_, i) => ({ i, tag: i % 2 ? "odd" : "even" })));
    results.insert = await items.countDocuments();
    const seen = await items.find({}, { batchSize: 4 }).sort({ i: 1 }).toArray();
    results.findGetMore = seen.length;
    const groups = await items.aggregate([{ $group: { _id: "$tag", n: { $sum: 1 } } }, { $sort: { _id: 1 } }],
                                         { cursor: { batchSize: 1 } }).toArray();
    results.aggregate = groups.map(g => `${g._id}:${g.n}`);
    results.update = (await items.updateMany({ tag: "odd" }, { $set: { odd: true } })).modifiedCount;
    results.delete = (await items.deleteMany({ i: { $gte: 20 } })).deletedCount;
    await items.createIndex({ tag: 1, i: -1 }, { name: "tag_i" });
    results.indexes = (await items.listIndexes().toArray()).map(ix => ix.name).sort();
    await items.dropIndex("tag_i");
    await db.createCollection("other");
    results.listCollections = (await db.listCollections({}, { nameOnly: true, batchSize: 1 }).toArray())
      .map(c => c.name).sort();
    const session = client.startSession();
    try {
      await session.withTransaction(async () => {
        await items.insertOne({ i: 100 }, { session });
        await db.collection("other").insertOne({ from: "txn" }, { session });
      });
    } finally {
      await session.endSession();
    }
    results.transaction = await items.countDocuments({ i: 100 }) + await db.collection("other").countDocuments();
    const aborted = client.startSession();
    try {
      aborted.startTransaction();
      await items.insertOne({ i: 200 }, { session: aborted });
      await aborted.abortTransaction();
    } finally {
      await aborted.endSession();
    }
    results.aborted = await items.countDocuments({ i: 200 });
  } finally {
    await db.dropDatabase();
    await client.close();
  }
  console.log(JSON.stringify(results));
}

main().catch(err => { console.error(err && err.stack || String(err)); process.exit(1); });
